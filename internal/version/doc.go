// Package version is the one place nodenet's version numbers come from: the
// API server's /version, the node agent's kubeletVersion, `nodenet version`
// and the daemons' user agents.
package version
