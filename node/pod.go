package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodenet/nodenet/daemonset"
	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/node/shim"
)

// NetnsAnnotation names a pod's network namespace (under /run/netns), so
// users and tests can `ip netns exec` into it.
const NetnsAnnotation = "nodenet.io/netns"

type container struct {
	name       string
	pid        int
	cmd        *exec.Cmd // nil when adopted from a previous agent
	startedAt  time.Time
	finishedAt time.Time
	restarts   int32
	exited     bool
	exitCode   int
	ready      bool
	readiness  probeState
	liveness   probeState
	// killedUnhealthy: the liveness probe failed and the container is
	// being stopped; checkContainers restarts it once it exits.
	killedUnhealthy bool
	done            chan struct{}
	// last is how the previous run ended (status.lastState).
	last *corev1.ContainerStateTerminated
	// backoff is the wait before the next restart after a crash, doubled
	// per crash as the kubelet does (10 s up to 5 min), reset after a run
	// of 10 minutes.
	backoff      time.Duration
	backoffEvent time.Time // when the current back-off was announced
}

// Crash-loop back-off, the kubelet's numbers.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 5 * time.Minute
	backoffReset   = 10 * time.Minute
)

// podWorker owns one pod: all kernel work for it happens on its goroutine.
type podWorker struct {
	a   *Agent
	uid types.UID

	mu       sync.Mutex
	latest   *corev1.Pod
	gone     bool
	kick     chan struct{}
	sb       *sandboxState
	ctrs     map[string]*container
	posted   corev1.PodStatus
	failMsg  string
	failedAt time.Time
	// waiting says why a container has not started (its env or volumes
	// cannot be set up yet): the status's waiting reason and message.
	waiting          map[string]*corev1.ContainerStateWaiting
	volumesRefreshed time.Time
	// tokenRefreshAt is when the service account token is renewed (zero:
	// none written by this worker); tokenAdoptChecked is set once the
	// worker has looked for a token an earlier agent wrote.
	tokenRefreshAt    time.Time
	tokenAdoptChecked bool
}

func newPodWorker(a *Agent, uid types.UID) *podWorker {
	return &podWorker{a: a, uid: uid, kick: make(chan struct{}, 1), ctrs: map[string]*container{}, waiting: map[string]*corev1.ContainerStateWaiting{}}
}

func (w *podWorker) update(p *corev1.Pod) {
	w.mu.Lock()
	if p == nil {
		w.gone = true
	} else {
		w.latest = p
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *podWorker) containerID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sb == nil {
		return ""
	}
	return w.sb.ContainerID
}

func (w *podWorker) netnsName() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sb == nil {
		return ""
	}
	return w.sb.Netns
}

func (w *podWorker) run(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		w.mu.Lock()
		pod, gone := w.latest, w.gone
		w.mu.Unlock()
		if gone {
			w.teardown(context.Background(), pod, 0)
			w.removeLogs(pod)
			w.a.forget(w.uid)
			return
		}
		if pod != nil && w.sync(ctx, pod) {
			w.removeLogs(pod)
			w.a.forget(w.uid)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-t.C:
		}
	}
}

// sync moves the pod one step toward its spec; true means the worker is
// done (the pod was deleted).
func (w *podWorker) sync(ctx context.Context, pod *corev1.Pod) bool {
	log := w.a.log.With("pod", pod.Namespace+"/"+pod.Name)
	if pod.DeletionTimestamp != nil {
		grace := 30 * time.Second
		if pod.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		}
		w.teardown(ctx, pod, grace)
		err := w.a.o.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.Warn("delete pod", "err", err)
			return false
		}
		log.Info("pod deleted")
		return true
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		if w.sb != nil {
			w.teardown(ctx, pod, 0)
		}
		return false
	}
	if w.sb == nil && w.failMsg == "" {
		if err := w.start(ctx, pod); err != nil {
			log.Warn("start pod", "err", err)
			if !w.fail(ctx, pod, err) {
				w.post(ctx, pod, w.pendingStatus(pod, err.Error()))
			}
			return false
		}
		log.Info("pod sandbox ready", "ips", w.sb.IPs, "netns", w.sb.Netns, "hostNetwork", w.sb.HostNetwork)
	}
	if w.sb == nil {
		return false
	}
	if err := w.startContainers(ctx, pod); err != nil {
		if w.fail(ctx, pod, err) {
			w.teardown(ctx, pod, 0)
			return false
		}
	}
	w.checkContainers(ctx, pod)
	w.refreshConfigMapVolumes(ctx, pod)
	w.refreshServiceAccountToken(ctx, pod)
	w.probe(ctx, pod)
	w.post(ctx, pod, w.runningStatus(pod))
	return false
}

// fail fails the pod when err is a podError (true), with a Failed event
// and the failed status.
func (w *podWorker) fail(ctx context.Context, pod *corev1.Pod, err error) bool {
	var fatal *podError
	if !errors.As(err, &fatal) {
		return false
	}
	w.failMsg, w.failedAt = err.Error(), time.Now()
	w.a.event(pod, fatal.container, corev1.EventTypeWarning, "Failed", "Error: %v", err)
	w.post(ctx, pod, w.failedStatus(pod, fatal.reason, w.failMsg))
	return true
}

// startContainers runs the init containers one at a time, in order, each
// to completion, then starts the containers not started yet. A container
// whose env or volumes cannot be set up yet waits (reported in its
// status, retried on the next sync); a podError fails the pod.
func (w *podWorker) startContainers(ctx context.Context, pod *corev1.Pod) error {
	done, err := w.runInit(ctx, pod)
	if err != nil || !done {
		return err
	}
	for _, c := range pod.Spec.Containers {
		w.mu.Lock()
		_, started := w.ctrs[c.Name]
		w.mu.Unlock()
		if started {
			continue
		}
		if err := w.startOrWait(ctx, pod, c); err != nil {
			return err
		}
	}
	return nil
}

// startOrWait starts c; an error that is not the pod's failure is kept as
// c's waiting state (with a Failed event when it is new).
func (w *podWorker) startOrWait(ctx context.Context, pod *corev1.Pod, c corev1.Container) error {
	err := w.startContainer(ctx, pod, c)
	var fatal *podError
	if err == nil || errors.As(err, &fatal) {
		w.mu.Lock()
		delete(w.waiting, c.Name)
		w.mu.Unlock()
		if err == nil {
			// A restarted agent must find this run's PID.
			err = w.a.saveState(w.sb)
		}
		return err
	}
	reason := "CreateContainerConfigError"
	var ve *volumeError
	if errors.As(err, &ve) {
		reason = "ContainerCreating"
	}
	w.mu.Lock()
	prev := w.waiting[c.Name]
	w.waiting[c.Name] = &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}
	w.mu.Unlock()
	if prev == nil || prev.Message != err.Error() {
		w.a.log.Warn("container cannot start yet", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "err", err)
		if ve != nil {
			w.a.event(pod, c.Name, corev1.EventTypeWarning, "FailedMount", "MountVolume.SetUp failed: %v", err)
		} else {
			w.a.event(pod, c.Name, corev1.EventTypeWarning, "Failed", "Error: %v", err)
		}
	}
	return nil
}

// runInit advances the init containers; done when all have completed.
// A failed one is restarted with the crash-loop back-off unless the
// restart policy is Never, which fails the pod.
func (w *podWorker) runInit(ctx context.Context, pod *corev1.Pod) (done bool, err error) {
	w.mu.Lock()
	initDone := w.sb.InitDone
	w.mu.Unlock()
	if initDone {
		return true, nil
	}
	for _, c := range pod.Spec.InitContainers {
		w.mu.Lock()
		ctr := w.ctrs[c.Name]
		if ctr != nil && ctr.cmd == nil && !ctr.exited && syscall.Kill(ctr.pid, 0) != nil {
			ctr.exited, ctr.exitCode, ctr.finishedAt = true, 137, time.Now() // adopted: its exit code is lost
		}
		w.mu.Unlock()
		switch {
		case ctr == nil:
			return false, w.startOrWait(ctx, pod, c)
		case !ctr.exited:
			return false, nil
		case ctr.exitCode == 0:
			continue
		case pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
			return false, &podError{"Init:Error", c.Name, fmt.Errorf("init container %q exited with code %d", c.Name, ctr.exitCode)}
		case w.backingOff(pod, ctr):
			return false, nil
		default:
			return false, w.startOrWait(ctx, pod, c)
		}
	}
	w.mu.Lock()
	w.sb.InitDone = true
	w.mu.Unlock()
	return true, w.a.saveState(w.sb)
}

// podError fails the pod (as opposed to a retryable error).
type podError struct {
	reason    string
	container string
	err       error
}

func (e *podError) Error() string { return e.err.Error() }
func (e *podError) Unwrap() error { return e.err }

// resolve maps a container's command to a binary of this host (images
// are not pulled, see doc.go): nodenet's image paths and "nodenet" to the
// built binaries, anything else looked up on the host.
func (w *podWorker) resolve(ctr corev1.Container, vars map[string]string) ([]string, error) {
	argv := append(append([]string{}, ctr.Command...), ctr.Args...)
	if len(argv) == 0 {
		return nil, &podError{"InvalidCommand", ctr.Name, fmt.Errorf("container %q: no command: images are not run, command+args name a host binary", ctr.Name)}
	}
	for i := range argv {
		argv[i] = expandVars(argv[i], vars)
	}
	if self := w.a.o.Self; self != "" {
		switch argv[0] {
		case "nodenet", daemonset.NodenetPath:
			if len(argv) > 1 && argv[1] == "echo" {
				// The demo and chaos pods' server: the lean binary
				// when built, as a real pod's image is small; the
				// multi-call binary pays ~70 ms of start-up per pod.
				return append(siblingCommand(self, "nodenet-echo", "echo"), argv[2:]...), nil
			}
			argv[0] = self
			return argv, nil
		case daemonset.NodenetCNIPath:
			argv[0] = w.a.cniPlugin()
			return argv, nil
		case daemonset.NodenetProxyPath:
			return append(w.a.proxyCommand(), argv[1:]...), nil
		}
	}
	p, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, &podError{"StartError", ctr.Name, fmt.Errorf("container %q: command %q not found: %w (image %q is not pulled: its command must be a host binary or one of the built binaries' image paths %s, %s, %s)",
			ctr.Name, argv[0], err, ctr.Image, daemonset.NodenetPath, daemonset.NodenetProxyPath, daemonset.NodenetCNIPath)}
	}
	argv[0] = p
	return argv, nil
}

// start creates the sandbox (or adopts one a previous agent left running).
func (w *podWorker) start(ctx context.Context, pod *corev1.Pod) error {
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if _, err := w.resolve(c, nil); err != nil {
			return err
		}
	}
	w.a.mu.Lock()
	old := w.a.adopt[pod.UID]
	delete(w.a.adopt, pod.UID)
	w.a.mu.Unlock()
	if old != nil && w.adopt(pod, old) {
		return nil
	}
	if old != nil {
		// The recorded sandbox is gone (the node restarted): until the
		// new one is up, the pod's recorded IPs answer nothing, so its
		// Services must stop sending there now, not once the release and
		// the new sandbox's CNI ADD and containers are done.
		w.post(ctx, pod, sandboxGoneStatus(pod))
	}
	if old != nil && !old.HostNetwork {
		// A recorded sandbox whose namespace is gone (the node rebooted,
		// or someone removed it): its IP is still reserved under its
		// container ID, which no new sandbox reuses, so it is released
		// first, as containerd removes a dead sandbox with a DEL. Until
		// that succeeds the pod does not start, so nothing leaks.
		if err := w.releaseStale(ctx, pod, old); err != nil {
			w.a.mu.Lock()
			w.a.adopt[pod.UID] = old
			w.a.mu.Unlock()
			return err
		}
	}
	if pod.Spec.HostNetwork {
		// The node's own namespace: no namespace of its own, no CNI.
		sb := &sandboxState{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, HostNetwork: true, ContainerID: randomID(),
			IPs: []string{w.a.o.NodeIP}, PIDs: map[string]int{}, Restarts: map[string]int32{}, Started: map[string]time.Time{}}
		if err := w.a.saveState(sb); err != nil {
			return err
		}
		w.mu.Lock()
		w.sb = sb
		w.mu.Unlock()
		return nil
	}
	if _, err := w.a.cni.confList(); err != nil {
		return err
	}
	w.a.gcMu.RLock()
	defer w.a.gcMu.RUnlock()
	id := randomID()
	name := w.a.o.NetnsPrefix + strings.ReplaceAll(string(pod.UID), "-", "")[:12]
	nsPath, err := netnsutil.Create(name)
	if err != nil {
		return err
	}
	sb := &sandboxState{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Netns: name, ContainerID: id, PIDs: map[string]int{}, Restarts: map[string]int32{}, Started: map[string]time.Time{}}
	success := false
	defer func() {
		if !success {
			_ = w.a.cni.del(context.Background(), pod, id, nsPath)
			_ = netnsutil.Delete(name)
		}
	}()
	if sb.IPs, err = w.a.cni.add(ctx, pod, id, nsPath); err != nil {
		return err
	}
	if err := w.a.saveState(sb); err != nil {
		return err
	}
	w.mu.Lock()
	w.sb = sb
	w.mu.Unlock()
	success = true
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, NetnsAnnotation, name)
	_, _ = w.a.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return nil
}

// releaseStale detaches a recorded sandbox that cannot be adopted: CNI
// DEL with its container ID (the plugin frees the IP and the host side
// even with the namespace gone) and the namespace's name if still there.
// Its processes are not signalled: with the namespace gone they died with
// it (a reboot), and their pids may belong to others by now.
func (w *podWorker) releaseStale(ctx context.Context, pod *corev1.Pod, s *sandboxState) error {
	if err := w.a.cni.del(ctx, pod, s.ContainerID, netnsutil.Path(s.Netns)); err != nil {
		return fmt.Errorf("release the stale sandbox %s of pod %s/%s: %w", s.ContainerID, pod.Namespace, pod.Name, err)
	}
	_ = netnsutil.Delete(s.Netns)
	w.a.log.Info("released stale sandbox", "pod", pod.Namespace+"/"+pod.Name, "netns", s.Netns, "ips", s.IPs)
	return nil
}

func (w *podWorker) adopt(pod *corev1.Pod, s *sandboxState) bool {
	if s.HostNetwork != pod.Spec.HostNetwork {
		return false
	}
	if !s.HostNetwork {
		if !netnsExists(s.Netns) {
			return false
		}
	}
	w.mu.Lock()
	w.sb = s
	w.mu.Unlock()
	ctrs := pod.Spec.Containers
	if !s.InitDone {
		ctrs = append(append([]corev1.Container{}, pod.Spec.InitContainers...), ctrs...)
	}
	for _, c := range ctrs {
		pid, recorded := s.PIDs[c.Name]
		if !recorded {
			continue // not started yet: startContainers starts it
		}
		started := s.Started[c.Name]
		if started.IsZero() {
			started = time.Now() // recorded by an agent that did not keep it
		}
		ctr := &container{name: c.Name, pid: pid, startedAt: started, restarts: s.Restarts[c.Name], done: make(chan struct{})}
		if pid == 0 || syscall.Kill(pid, 0) != nil {
			ctr.exited, ctr.exitCode = true, 137
		}
		w.ctrs[c.Name] = ctr
	}
	w.a.log.Info("adopted running pod", "pod", pod.Namespace+"/"+pod.Name, "netns", s.Netns)
	return true
}

func (w *podWorker) startContainer(ctx context.Context, pod *corev1.Pod, c corev1.Container) error {
	env, vars, err := w.containerEnv(ctx, pod, c)
	if err != nil {
		return err
	}
	argv, err := w.resolve(c, vars)
	if err != nil {
		return err
	}
	mounts, err := w.containerMounts(ctx, pod, c)
	if err != nil {
		return err
	}
	mounts = append(mounts, w.imageBinaries(c)...)
	if len(mounts) > 0 && w.a.o.Self == "" {
		return &podError{"CreateContainerConfigError", c.Name, fmt.Errorf("container %q: volumes need the shim (agent without Options.Self)", c.Name)}
	}
	prev := w.ctrs[c.Name]
	restarts := int32(0)
	if prev != nil {
		restarts = prev.restarts + 1
	}
	logPath := w.a.containerLogPath(pod.Namespace, pod.Name, pod.UID, c.Name, restarts)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return fmt.Errorf("container %q: create log dir: %w", c.Name, err)
	}
	// The shim writes timestamped CRI log lines and outlives this agent,
	// as containerd's shim does, so a restarted agent adopts the pod with
	// its logging intact. Without this binary (an agent embedded in
	// another program) output goes to the file as is, without timestamps.
	var logf *os.File
	if w.a.o.Self != "" {
		args, err := shim.Options{Log: logPath, Mounts: mounts, Argv: argv}.Args()
		if err != nil {
			return fmt.Errorf("container %q: %w", c.Name, err)
		}
		argv = append(shimCommand(w.a.o.Self), args...)
		logf, err = os.Open(os.DevNull)
	} else {
		logf, err = os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	}
	if err != nil {
		return fmt.Errorf("container %q: open log: %w", c.Name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	if c.WorkingDir != "" {
		cmd.Dir = c.WorkingDir
	}
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.startIn(cmd); err != nil {
		logf.Close()
		return &podError{"StartError", c.Name, fmt.Errorf("container %q: start %s: %w", c.Name, argv[0], err)}
	}
	logf.Close()
	ctr := &container{name: c.Name, pid: cmd.Process.Pid, cmd: cmd, startedAt: time.Now(), restarts: restarts, done: make(chan struct{})}
	if prev != nil {
		ctr.backoff, ctr.last = prev.backoff, prev.terminated()
	}
	w.mu.Lock()
	w.ctrs[c.Name] = ctr
	w.sb.PIDs[c.Name] = ctr.pid
	// A record adopted from an older agent may lack these.
	if w.sb.Restarts == nil {
		w.sb.Restarts = map[string]int32{}
	}
	if w.sb.Started == nil {
		w.sb.Started = map[string]time.Time{}
	}
	w.sb.Restarts[c.Name], w.sb.Started[c.Name] = restarts, ctr.startedAt
	w.mu.Unlock()
	w.a.event(pod, c.Name, corev1.EventTypeNormal, "Created", "Created container: %s", c.Name)
	w.a.event(pod, c.Name, corev1.EventTypeNormal, "Started", "Started container %s", c.Name)
	go func() {
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			if code < 0 {
				code = 137
			}
		}
		w.mu.Lock()
		ctr.exited, ctr.exitCode, ctr.finishedAt = true, code, time.Now()
		w.mu.Unlock()
		close(ctr.done)
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}()
	return nil
}

// checkContainers restarts exited containers per the restart policy.
func (w *podWorker) checkContainers(ctx context.Context, pod *corev1.Pod) {
	for _, c := range pod.Spec.Containers {
		w.mu.Lock()
		ctr := w.ctrs[c.Name]
		if ctr == nil {
			w.mu.Unlock()
			continue // not started yet (startContainers)
		}
		if ctr.cmd == nil && !ctr.exited && syscall.Kill(ctr.pid, 0) != nil {
			ctr.exited, ctr.exitCode, ctr.finishedAt = true, 137, time.Now()
		}
		exited := ctr != nil && ctr.exited
		w.mu.Unlock()
		if !exited {
			continue
		}
		restart := pod.Spec.RestartPolicy == corev1.RestartPolicyAlways || pod.Spec.RestartPolicy == "" ||
			(pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure && ctr.exitCode != 0)
		if !restart || w.backingOff(pod, ctr) {
			continue
		}
		if err := w.startContainer(ctx, pod, c); err != nil {
			w.a.log.Warn("restart container", "pod", pod.Name, "container", c.Name, "err", err)
			w.a.event(pod, c.Name, corev1.EventTypeWarning, "Failed", "Error: %v", err)
		} else {
			_ = w.a.saveState(w.sb)
		}
	}
}

// killAll stops every container at once: its preStop hook, SIGTERM, then
// SIGKILL once grace has passed.
func (w *podWorker) killAll(ctx context.Context, pod *corev1.Pod, grace time.Duration) {
	w.mu.Lock()
	ctrs := make([]*container, 0, len(w.ctrs))
	for _, c := range w.ctrs {
		ctrs = append(ctrs, c)
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range ctrs {
		if !c.alive() {
			continue
		}
		if pod != nil {
			w.a.event(pod, c.name, corev1.EventTypeNormal, "Killing", "Stopping container %s", c.name)
		}
		wg.Go(func() { w.stopContainer(ctx, pod, c, grace) })
	}
	wg.Wait()
}

// alive reports whether the container's process still runs.
func (c *container) alive() bool {
	if c.cmd != nil {
		select {
		case <-c.done:
			return false
		default:
			return true
		}
	}
	return c.pid > 0 && syscall.Kill(c.pid, 0) == nil
}

// stop sends SIGTERM to the container's process group (none with no
// grace), then SIGKILL once grace has passed, and returns when it is gone
// (or, for an adopted process, signalled).
func (c *container) stop(grace time.Duration) {
	if grace > 0 {
		c.signal(syscall.SIGTERM)
	}
	for deadline := time.Now().Add(grace); c.alive() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if !c.alive() {
		return
	}
	c.signal(syscall.SIGKILL)
	if c.cmd != nil {
		<-c.done
	}
}

// signal sends sig once: to the container's process group, or to the
// process alone when it leads no group (an adopted process). Sending to
// both delivered a SIGTERM twice to the group leader, whose TERM trap
// then ran twice; a runtime signals once.
func (c *container) signal(sig syscall.Signal) {
	if c.pid <= 0 {
		return // kill(-0) would signal the agent's own group
	}
	if err := syscall.Kill(-c.pid, sig); errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(c.pid, sig)
	}
}

// teardown stops the containers, detaches the network and removes the
// namespace and the recorded state.
func (w *podWorker) teardown(ctx context.Context, pod *corev1.Pod, grace time.Duration) {
	w.mu.Lock()
	sb := w.sb
	w.mu.Unlock()
	if sb == nil {
		return
	}
	w.killAll(ctx, pod, grace)
	if pod == nil {
		pod = &corev1.Pod{}
		pod.Namespace, pod.Name, pod.UID = sb.Namespace, sb.Name, sb.UID
	}
	if !sb.HostNetwork {
		if err := w.a.cni.del(ctx, pod, sb.ContainerID, netnsutil.Path(sb.Netns)); err != nil {
			w.a.log.Warn("CNI DEL", "pod", pod.Name, "err", err)
		}
		if err := netnsutil.Delete(sb.Netns); err != nil {
			w.a.log.Warn("remove netns", "pod", pod.Name, "err", err)
		}
	}
	if err := os.RemoveAll(w.a.podVolumeDir(sb.UID)); err != nil {
		w.a.log.Warn("remove pod volumes", "pod", pod.Name, "err", err)
	}
	_ = os.Remove(w.a.statePath(sb.UID))
	w.mu.Lock()
	w.sb = nil
	w.mu.Unlock()
}

// removeLogs deletes a deleted pod's logs, as the kubelet does.
func (w *podWorker) removeLogs(pod *corev1.Pod) {
	if pod == nil {
		return
	}
	if err := os.RemoveAll(w.a.podLogDir(pod.Namespace, pod.Name, pod.UID)); err != nil {
		w.a.log.Warn("remove pod logs", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

// imageBinaries: a container of the nodenet image (its command is one of
// the image's binary paths) sees the built binaries at those paths too,
// read-only, so arguments naming them work (install-cni --source).
func (w *podWorker) imageBinaries(c corev1.Container) []Mount {
	argv := append(append([]string{}, c.Command...), c.Args...)
	if w.a.o.Self == "" || len(argv) == 0 || !slices.Contains([]string{daemonset.NodenetPath, daemonset.NodenetProxyPath, daemonset.NodenetCNIPath}, argv[0]) {
		return nil
	}
	out := []Mount{{Source: w.a.o.Self, Target: daemonset.NodenetPath, ReadOnly: true}}
	if p := w.a.proxyCommand(); len(p) == 1 { // built: not `nodenet proxy`
		out = append(out, Mount{Source: p[0], Target: daemonset.NodenetProxyPath, ReadOnly: true})
	}
	if cni := w.a.cniPlugin(); fileExists(cni) {
		out = append(out, Mount{Source: cni, Target: daemonset.NodenetCNIPath, ReadOnly: true})
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// startIn starts cmd in the pod's network namespace, or the agent's own
// for a hostNetwork pod, and in Options.PodCgroup when set.
func (w *podWorker) startIn(cmd *exec.Cmd) error {
	if w.a.o.PodCgroup != "" {
		// Born in the cgroup (clone3 CLONE_INTO_CGROUP), not moved there
		// after the start: a socket the process opens at once is already
		// under the node's socket programs.
		cg, err := os.Open(w.a.o.PodCgroup)
		if err != nil {
			return fmt.Errorf("open pod cgroup: %w", err)
		}
		defer cg.Close()
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	if w.sb.HostNetwork {
		return cmd.Start()
	}
	return netnsutil.Start(netnsutil.Path(w.sb.Netns), cmd)
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// post writes the status when it changed, or when the API's copy (pod,
// the latest the informer delivered) disagrees with what was posted on
// the phase or readiness: someone else wrote it, as the node lifecycle
// controller does when it sets the pods of a node that went silent not
// ready. Like the kubelet's status manager, the agent then writes its
// own view back; without that, pods of a node that was cut off stayed
// out of their Services after the node returned.
func (w *podWorker) post(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus) {
	if reflect.DeepEqual(st, w.posted) && !readinessDiffers(pod.Status, st) {
		return
	}
	fresh, err := w.a.o.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || fresh.UID != pod.UID {
		return
	}
	if reflect.DeepEqual(st, w.posted) && !readinessDiffers(fresh.Status, st) {
		// Only the informer's copy lagged behind our last write: the API
		// already holds it, so no second write.
		return
	}
	fresh.Status = st
	if _, err := w.a.o.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		w.a.log.Warn("update pod status", "pod", pod.Name, "err", err)
		return
	}
	w.posted = st
}

// readinessDiffers is whether two statuses disagree on the phase or on
// the Ready or ContainersReady condition's status (not their times, which
// the API stores at a coarser precision).
func readinessDiffers(a, b corev1.PodStatus) bool {
	if a.Phase != b.Phase {
		return true
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		if conditionStatus(a, t) != conditionStatus(b, t) {
			return true
		}
	}
	return false
}

func conditionStatus(s corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}
