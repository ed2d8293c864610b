package cni

import "github.com/nodenet/nodenet/cni/kernel"

// PreparedPod is a pod namespace, and a route netlink socket inside it,
// that the binary opened before the command ran (see PreparePod).
type PreparedPod struct{ ns *kernel.NetNS }

// PreparePod opens the pod's namespace and a route netlink socket in it
// ahead of the command, by switching the calling thread into the
// namespace and back without runtime.LockOSThread (kernel.PrepareNetNS):
// the binary calls it during package initialization, the one moment that
// is safe and saves starting the extra thread LockOSThread would. A
// namespace that cannot be opened yields nil and no error; the command
// then runs into the problem itself and reports it as usual. The error is
// for a thread that could not switch back: the process must not go on.
func PreparePod(path string) (*PreparedPod, error) {
	ns, err := kernel.PrepareNetNS(path)
	if err != nil || ns == nil {
		return nil, err
	}
	return &PreparedPod{ns: ns}, nil
}

// openPod opens the pod namespace at path, or hands out the prepared one
// (once).
func (p *Plugin) openPod(path string) (*kernel.NetNS, error) {
	if pp := p.Prepared; pp != nil && pp.ns != nil && pp.ns.Path() == path {
		ns := pp.ns
		pp.ns = nil
		return ns, nil
	}
	return kernel.OpenNetNS(path)
}
