package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
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

func (w *podWorker) pendingStatus(pod *corev1.Pod, msg string) corev1.PodStatus {
	st := w.base(pod)
	st.Phase = corev1.PodPending
	st.Message = msg
	st.Conditions = []corev1.PodCondition{condition(corev1.PodScheduled, true, *st.StartTime), condition(corev1.PodReady, false, *st.StartTime)}
	return st
}

func (w *podWorker) failedStatus(pod *corev1.Pod, reason, msg string) corev1.PodStatus {
	st := w.base(pod)
	st.Phase, st.Reason, st.Message = corev1.PodFailed, reason, msg
	st.Conditions = []corev1.PodCondition{condition(corev1.PodScheduled, true, *st.StartTime), condition(corev1.PodReady, false, *st.StartTime)}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 128, Reason: reason, Message: msg}}})
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
	allReady, allDone, anyFailed := true, true, false
	for _, c := range pod.Spec.Containers {
		ctr := w.ctrs[c.Name]
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "host://" + c.Image, ContainerID: "nodenet://" + w.sb.ContainerID[:12] + "-" + c.Name, Started: new(bool)}
		if ctr == nil {
			allReady = false
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		} else if ctr.exited {
			allReady = false
			cs.RestartCount = ctr.restarts
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: int32(ctr.exitCode), Reason: "Completed", StartedAt: metav1.Time{Time: ctr.startedAt.Truncate(time.Second)}}
			if ctr.exitCode != 0 {
				cs.State.Terminated.Reason = "Error"
				anyFailed = true
			}
		} else {
			allDone = false
			cs.RestartCount = ctr.restarts
			*cs.Started = true
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: ctr.startedAt.Truncate(time.Second)}}
			cs.Ready = ctr.ready || c.ReadinessProbe == nil
			allReady = allReady && cs.Ready
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	never := pod.Spec.RestartPolicy == corev1.RestartPolicyNever || (pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure && !anyFailed)
	switch {
	case allDone && never && anyFailed:
		st.Phase = corev1.PodFailed
	case allDone && never:
		st.Phase = corev1.PodSucceeded
	default:
		st.Phase = corev1.PodRunning
	}
	t := *st.StartTime
	st.Conditions = []corev1.PodCondition{
		condition(corev1.PodScheduled, true, t), condition(corev1.PodInitialized, true, t),
		condition(corev1.PodReadyToStartContainers, true, t),
		condition(corev1.ContainersReady, allReady, t), condition(corev1.PodReady, allReady, t),
	}
	return st
}

// probe runs the readiness probes that are due.
func (w *podWorker) probe(ctx context.Context, pod *corev1.Pod) {
	for _, c := range pod.Spec.Containers {
		p := c.ReadinessProbe
		w.mu.Lock()
		ctr := w.ctrs[c.Name]
		w.mu.Unlock()
		if p == nil || ctr == nil || ctr.exited {
			continue
		}
		now := time.Now()
		if ctr.nextProbe.IsZero() {
			ctr.nextProbe = ctr.startedAt.Add(time.Duration(p.InitialDelaySeconds) * time.Second)
		}
		if now.Before(ctr.nextProbe) {
			continue
		}
		period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
		if p.PeriodSeconds == 0 {
			period = 10 * time.Second
		}
		ctr.nextProbe = now.Add(period)
		timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
		err := w.runProbe(ctx, pod, c, p, timeout)
		w.mu.Lock()
		if err == nil {
			ctr.ready, ctr.fails = true, 0
		} else {
			ctr.fails++
			if ctr.fails >= int(max(p.FailureThreshold, 1)) || !ctr.ready {
				ctr.ready = false
			}
		}
		w.mu.Unlock()
	}
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
		cl := &http.Client{Timeout: timeout}
		resp, err := cl.Get("http://" + net.JoinHostPort(ip, pt) + p.HTTPGet.Path)
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
		if err := inNetns(filepath.Join(netnsDir, w.sb.Netns), cmd.Start); err != nil {
			return err
		}
		return cmd.Wait()
	}
	return nil
}
