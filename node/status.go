package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func condition(t corev1.PodConditionType, ok bool, since metav1.Time) corev1.PodCondition {
	s := corev1.ConditionFalse
	if ok {
		s = corev1.ConditionTrue
	}
	return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: since}
}

func (w *podWorker) base(pod *corev1.Pod) corev1.PodStatus {
	st := corev1.PodStatus{HostIP: w.a.o.NodeIP, HostIPs: []corev1.HostIP{{IP: w.a.o.NodeIP}}, StartTime: pod.Status.StartTime, QOSClass: corev1.PodQOSBestEffort}
	if st.StartTime == nil {
		st.StartTime = &metav1.Time{Time: pod.CreationTimestamp.Time}
	}
	return st
}

// sandboxGoneStatus is the pod's posted status with the pod and its
// containers not ready, as the kubelet reports a pod whose sandbox died:
// the phase and IPs stay until the new sandbox replaces them.
func sandboxGoneStatus(pod *corev1.Pod) corev1.PodStatus {
	st := *pod.Status.DeepCopy()
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for i, c := range st.Conditions {
		if (c.Type == corev1.PodReady || c.Type == corev1.ContainersReady) && c.Status != corev1.ConditionFalse {
			st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = corev1.ConditionFalse, now
			st.Conditions[i].Reason, st.Conditions[i].Message = "SandboxChanged", "the pod's sandbox is gone and is being recreated"
		}
	}
	for i := range st.ContainerStatuses {
		st.ContainerStatuses[i].Ready = false
	}
	return st
}

func (w *podWorker) pendingStatus(pod *corev1.Pod, msg string) corev1.PodStatus {
	st := w.base(pod)
	st.Phase = corev1.PodPending
	st.Message = msg
	st.Conditions = w.keepTransitions(pod, []corev1.PodCondition{condition(corev1.PodScheduled, true, *st.StartTime), condition(corev1.PodReady, false, *st.StartTime)})
	return st
}

// keepTransitions gives each condition the time its status last changed:
// the one already posted when the status is the same, else now. (A fixed
// time would say nothing about when a pod became ready or failed.)
func (w *podWorker) keepTransitions(pod *corev1.Pod, conds []corev1.PodCondition) []corev1.PodCondition {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	// What this worker posted last is newer than the informer's copy.
	prev := w.posted.Conditions
	if len(prev) == 0 {
		prev = pod.Status.Conditions
	}
	for i := range conds {
		conds[i].LastTransitionTime = now
		if conds[i].Type == corev1.PodScheduled {
			conds[i].LastTransitionTime = pod.CreationTimestamp
		}
		for _, old := range prev {
			if old.Type == conds[i].Type && old.Status == conds[i].Status && !old.LastTransitionTime.IsZero() {
				conds[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	return conds
}

func (w *podWorker) failedStatus(pod *corev1.Pod, reason, msg string) corev1.PodStatus {
	st := w.base(pod)
	st.Phase, st.Reason, st.Message = corev1.PodFailed, reason, msg
	st.Conditions = w.keepTransitions(pod, []corev1.PodCondition{condition(corev1.PodScheduled, true, *st.StartTime), condition(corev1.PodReady, false, *st.StartTime)})
	// The containers never ran: they started and finished at the failure,
	// with the exit code 128 container runtimes use for a failed start.
	at := metav1.NewTime(w.failedAt)
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 128, Reason: reason, Message: msg, StartedAt: at, FinishedAt: at}}})
	}
	return st
}

func (w *podWorker) runningStatus(pod *corev1.Pod) corev1.PodStatus {
	st := w.base(pod)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ip := range w.sb.IPs {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
	}
	st.PodIP = w.sb.IPs[0]
	initDone := w.sb.InitDone || len(pod.Spec.InitContainers) == 0
	st.InitContainerStatuses = w.initStatuses(pod)
	allReady, allDone, anyFailed := true, true, false
	for _, c := range pod.Spec.Containers {
		ctr := w.ctrs[c.Name]
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "host://" + c.Image, ContainerID: "nodenet://" + w.sb.ContainerID[:12] + "-" + c.Name, Started: new(bool)}
		if ctr != nil {
			cs.RestartCount = ctr.restarts
			if ctr.last != nil {
				cs.LastTerminationState.Terminated = ctr.last
			}
		}
		if ctr == nil {
			allReady, allDone = false, false
			switch {
			case !initDone:
				cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
			case w.waiting[c.Name] != nil:
				cs.State.Waiting = w.waiting[c.Name].DeepCopy()
			default:
				cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
			}
		} else if ctr.inBackOff() {
			// Between a crash and its restart the kubelet reports the
			// crash as the last state and the container as waiting.
			allReady, allDone = false, false
			cs.LastTerminationState.Terminated = ctr.terminated()
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", ctr.backoff, c.Name, pod.Name, pod.Namespace, pod.UID)}
		} else if ctr.exited {
			allReady = false
			cs.State.Terminated = ctr.terminated()
			cs.State.Terminated.ContainerID = cs.ContainerID
			anyFailed = anyFailed || ctr.exitCode != 0
		} else {
			allDone = false
			*cs.Started = true
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: ctr.startedAt.Truncate(time.Second)}}
			cs.Ready = ctr.ready || c.ReadinessProbe == nil
			allReady = allReady && cs.Ready
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	never := pod.Spec.RestartPolicy == corev1.RestartPolicyNever || (pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure && !anyFailed)
	switch {
	case !initDone:
		st.Phase = corev1.PodPending
	case allDone && never && anyFailed:
		st.Phase = corev1.PodFailed
	case allDone && never:
		st.Phase = corev1.PodSucceeded
	default:
		st.Phase = corev1.PodRunning
	}
	t := *st.StartTime
	st.Conditions = w.keepTransitions(pod, []corev1.PodCondition{
		condition(corev1.PodScheduled, true, t), condition(corev1.PodInitialized, initDone, t),
		condition(corev1.PodReadyToStartContainers, st.Phase == corev1.PodRunning, t),
		condition(corev1.ContainersReady, allReady, t), condition(corev1.PodReady, allReady, t),
	})
	if !allReady {
		var unready []string
		for _, cs := range st.ContainerStatuses {
			if !cs.Ready {
				unready = append(unready, cs.Name)
			}
		}
		for i := range st.Conditions {
			switch {
			case st.Conditions[i].Type == corev1.PodInitialized && !initDone:
				st.Conditions[i].Reason = "ContainersNotInitialized"
			case initDone && st.Phase != corev1.PodRunning && st.Conditions[i].Type != corev1.PodScheduled && st.Conditions[i].Type != corev1.PodInitialized:
				st.Conditions[i].Reason = "PodCompleted"
			case st.Conditions[i].Type == corev1.ContainersReady || st.Conditions[i].Type == corev1.PodReady:
				st.Conditions[i].Reason = "ContainersNotReady"
				st.Conditions[i].Message = fmt.Sprintf("containers with unready status: %v", unready)
			}
		}
	}
	return st
}

// initStatuses are the init containers' statuses (w.mu held): completed
// ones terminated with their exit code (a restarted agent that adopted the
// pod after its init containers ran reports them as completed), the one
// running, the ones after it waiting.
func (w *podWorker) initStatuses(pod *corev1.Pod) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, c := range pod.Spec.InitContainers {
		ctr := w.ctrs[c.Name]
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "host://" + c.Image, ContainerID: "nodenet://" + w.sb.ContainerID[:12] + "-" + c.Name, Started: new(bool)}
		switch {
		case ctr == nil && w.sb.InitDone:
			cs.State.Terminated = &corev1.ContainerStateTerminated{Reason: "Completed", ContainerID: cs.ContainerID}
			cs.Ready = true
		case ctr == nil && w.waiting[c.Name] != nil:
			cs.State.Waiting = w.waiting[c.Name].DeepCopy()
		case ctr == nil:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		case ctr.inBackOff():
			cs.RestartCount = ctr.restarts
			cs.LastTerminationState.Terminated = ctr.terminated()
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", ctr.backoff, c.Name, pod.Name, pod.Namespace, pod.UID)}
		case ctr.exited:
			cs.RestartCount = ctr.restarts
			cs.State.Terminated = ctr.terminated()
			cs.State.Terminated.ContainerID = cs.ContainerID
			cs.Ready = ctr.exitCode == 0
		default:
			cs.RestartCount = ctr.restarts
			*cs.Started = true
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: ctr.startedAt.Truncate(time.Second)}}
		}
		if ctr != nil && ctr.last != nil && cs.LastTerminationState.Terminated == nil {
			cs.LastTerminationState.Terminated = ctr.last
		}
		out = append(out, cs)
	}
	return out
}

// probeState is one probe's schedule and consecutive results.
type probeState struct {
	next  time.Time
	fails int
}

// due reports whether the probe should run now and schedules the next run.
func (ps *probeState) due(p *corev1.Probe, started, now time.Time) bool {
	if ps.next.IsZero() {
		ps.next = started.Add(time.Duration(p.InitialDelaySeconds) * time.Second)
	}
	if now.Before(ps.next) {
		return false
	}
	period := 10 * time.Second
	if p.PeriodSeconds > 0 {
		period = time.Duration(p.PeriodSeconds) * time.Second
	}
	ps.next = now.Add(period)
	return true
}

// probe runs the readiness and liveness probes that are due, as the
// kubelet does: readiness gates the container's Ready; FailureThreshold
// liveness failures in a row stop the container (grace period, then
// SIGKILL), and the restart policy brings it back.
func (w *podWorker) probe(ctx context.Context, pod *corev1.Pod) {
	for _, c := range pod.Spec.Containers {
		w.mu.Lock()
		ctr := w.ctrs[c.Name]
		w.mu.Unlock()
		if ctr == nil || ctr.exited || ctr.killedUnhealthy {
			continue
		}
		now := time.Now()
		if p := c.ReadinessProbe; p != nil && ctr.readiness.due(p, ctr.startedAt, now) {
			err := w.runProbe(ctx, pod, c, p, probeTimeout(p))
			w.mu.Lock()
			if err == nil {
				ctr.ready, ctr.readiness.fails = true, 0
			} else {
				ctr.readiness.fails++
				if ctr.readiness.fails >= int(max(p.FailureThreshold, 1)) || !ctr.ready {
					ctr.ready = false
				}
			}
			w.mu.Unlock()
		}
		if p := c.LivenessProbe; p != nil && ctr.liveness.due(p, ctr.startedAt, now) {
			err := w.runProbe(ctx, pod, c, p, probeTimeout(p))
			w.mu.Lock()
			if err == nil {
				ctr.liveness.fails = 0
				w.mu.Unlock()
				continue
			}
			ctr.liveness.fails++
			kill := ctr.liveness.fails >= int(max(p.FailureThreshold, 1))
			if kill {
				ctr.killedUnhealthy, ctr.ready = true, false
			}
			w.mu.Unlock()
			w.a.event(pod, c.Name, corev1.EventTypeWarning, "Unhealthy", "Liveness probe failed: %v", err)
			if kill {
				w.a.event(pod, c.Name, corev1.EventTypeNormal, "Killing", "Container %s failed liveness probe, will be restarted", c.Name)
				go w.stopContainer(ctx, pod, ctr, terminationGrace(pod))
			}
		}
	}
}

func probeTimeout(p *corev1.Probe) time.Duration {
	return time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
}

// terminationGrace is the pod's terminationGracePeriodSeconds (default 30).
func terminationGrace(pod *corev1.Pod) time.Duration {
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

func port(c corev1.Container, p intstr.IntOrString) (string, error) {
	if p.Type == intstr.Int {
		return strconv.Itoa(p.IntValue()), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return strconv.Itoa(int(cp.ContainerPort)), nil
		}
	}
	return "", fmt.Errorf("no port named %q", p.StrVal)
}

func (w *podWorker) runProbe(ctx context.Context, pod *corev1.Pod, c corev1.Container, p *corev1.Probe, timeout time.Duration) error {
	ip := w.sb.IPs[0]
	switch {
	case p.TCPSocket != nil:
		pt, err := port(c, p.TCPSocket.Port)
		if err != nil {
			return err
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, pt), timeout)
		if err != nil {
			return err
		}
		return conn.Close()
	case p.HTTPGet != nil:
		pt, err := port(c, p.HTTPGet.Port)
		if err != nil {
			return err
		}
		host := ip
		if p.HTTPGet.Host != "" {
			host = p.HTTPGet.Host // as the kubelet: dialled from the agent's namespace
		}
		cl := &http.Client{Timeout: timeout}
		resp, err := cl.Get("http://" + net.JoinHostPort(host, pt) + p.HTTPGet.Path)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("http status %d", resp.StatusCode)
		}
		return nil
	case p.Exec != nil && len(p.Exec.Command) > 0:
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		argv := append([]string{}, p.Exec.Command...)
		if argv[0] == "nodenet" && w.a.o.Self != "" {
			argv[0] = w.a.o.Self
		}
		cmd := exec.CommandContext(cctx, argv[0], argv[1:]...)
		if err := w.startIn(cmd); err != nil {
			return err
		}
		return cmd.Wait()
	}
	return nil
}
