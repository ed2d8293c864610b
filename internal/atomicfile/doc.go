// Package atomicfile writes files that other programs read while they are
// being replaced — subnet.env, CNI conflists, credentials — so a reader sees
// the old content or the new, never half of it, even across a crash. It
// depends on the standard library only (the lean CNI binary links it).
package atomicfile
