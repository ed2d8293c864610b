package version

import (
	"runtime"
	"strings"

	"k8s.io/apimachinery/pkg/version"
)

// Kubernetes is the Kubernetes release whose API nodenet serves and speaks:
// that of the k8s.io/api module it is built with (v0.37.2 is Kubernetes
// v1.37.2). A test keeps the two equal, so a dependency bump cannot leave
// the reported version behind.
const Kubernetes = "v1.37.2"

// GitVersion is what nodenet reports as its Kubernetes version. "+nodenet"
// is semver build metadata: Kubernetes' version parsers read it as 1.37.2
// exactly (a "-nodenet" suffix would be a pre-release, older than 1.37.2).
const GitVersion = Kubernetes + "+nodenet"

// Info is the /version document of the API server.
func Info() version.Info {
	parts := strings.SplitN(strings.TrimPrefix(Kubernetes, "v"), ".", 3)
	return version.Info{
		Major: parts[0], Minor: parts[1], GitVersion: GitVersion,
		GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// UserAgent is the user agent of a nodenet component, in the form of
// Kubernetes' own ("kube-proxy/v1.37.2 (linux/amd64) ..."), so that API
// server logs and audit name the component and its version.
func UserAgent(component string) string {
	return component + "/" + GitVersion + " (" + runtime.GOOS + "/" + runtime.GOARCH + ") nodenet"
}
