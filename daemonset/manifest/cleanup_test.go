package manifest

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestCleanupManifest decodes the uninstall manifest strictly and checks
// that its pod can reach everything the install's pod wrote, at the same
// host paths, with the privileges the cleanup needs, on every node.
func TestCleanupManifest(t *testing.T) {
	o := Defaults()
	o.Namespace = "nn-test"
	y, err := RenderCleanup(o)
	if err != nil {
		t.Fatal(err)
	}
	d := decodeStrict(t, y, 2)
	if d.ns.Name != o.Namespace || d.ds.Namespace != o.Namespace || d.ds.Name != CleanupName {
		t.Errorf("namespace %q, DaemonSet %s/%s", d.ns.Name, d.ds.Namespace, d.ds.Name)
	}
	if d.ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace labels %v: a privileged pod would not be admitted", d.ns.Labels)
	}
	spec := d.ds.Spec.Template.Spec
	if !spec.HostNetwork || len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("pod spec: hostNetwork %v tolerations %+v", spec.HostNetwork, spec.Tolerations)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("containers %+v", spec.Containers)
	}
	c := spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged || c.Image != o.Image {
		t.Errorf("container: image %q security context %+v", c.Image, c.SecurityContext)
	}
	if len(c.Command) < 3 || c.Command[1] != "cleanup" || !slices.Contains(c.Command, "--stay") {
		t.Errorf("command %q: want nodenet cleanup --stay", c.Command)
	}
	// Every path the command names lies under a mount of the host path of
	// the same name.
	mounts := map[string]string{}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for _, m := range c.VolumeMounts {
		if hostPaths[m.Name] != m.MountPath {
			t.Errorf("mount %s at %s of host path %q: the cleanup would see other paths than the host's", m.Name, m.MountPath, hostPaths[m.Name])
		}
		mounts[m.MountPath] = m.Name
	}
	for i, arg := range c.Command {
		if !strings.HasPrefix(arg, "/") || i < 2 {
			continue
		}
		covered := false
		for mp := range mounts {
			covered = covered || arg == mp || strings.HasPrefix(arg, mp+"/")
		}
		if !covered {
			t.Errorf("%s %s: not under a host mount", c.Command[i-1], arg)
		}
	}
	// The install's host paths are all reachable.
	inst := decodeStrict(t, must(Render(o)), 6)
	for _, v := range inst.ds.Spec.Template.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		if hostPaths[v.Name] != v.HostPath.Path {
			t.Errorf("install's host path %s (%s) is %q in the cleanup", v.Name, v.HostPath.Path, hostPaths[v.Name])
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
