// Package protocol is the CNI protocol as a plugin binary speaks it (spec
// versions 0.3.1 to 1.1.0): dispatch on CNI_COMMAND, the CNI_* variables,
// the checks every command gets before it runs (configuration name,
// version negotiation, the plugin's own namespace), results in the shape
// of each version, error objects with the spec's codes, VERSION's answer,
// and a decoder for network configurations. What a command does is the
// Plugin's business (package cni).
//
// It replaces the reference library's skel and types packages: those
// compile regular expressions and register result converters when the
// process starts, and a plugin process lives for one command, so their
// start-up was a measurable part of every ADD and DEL. For the same
// reason results and error objects are written by hand, and
// configurations are decoded without reflection where that is safe
// (Decode).
package protocol
