package node

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// sandboxState is persisted per pod so a restarted agent can adopt it.
type sandboxState struct {
	UID         types.UID      `json:"uid"`
	Namespace   string         `json:"namespace"`
	Name        string         `json:"name"`
	Netns       string         `json:"netns"`
	ContainerID string         `json:"containerID"`
	IPs         []string       `json:"ips"`
	PIDs        map[string]int `json:"pids"`
	// Restarts numbers each container's current run: its log file is
	// <restarts>.log, the previous run's stays beside it.
	Restarts map[string]int32 `json:"restarts,omitempty"`
	// Started keeps each container's start time for a restarted agent.
	Started map[string]time.Time `json:"started,omitempty"`
	// HostNetwork pods have no namespace (Netns is empty) and no CNI
	// attachment; IPs holds the node's IP.
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// InitDone: every init container has completed; they do not run again
	// for this sandbox.
	InitDone bool `json:"initDone,omitempty"`
}

func (a *Agent) saveState(s *sandboxState) error {
	b, _ := json.Marshal(s)
	tmp := a.statePath(s.UID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, a.statePath(s.UID))
}

// loadState reads every recorded sandbox.
func (a *Agent) loadState() map[types.UID]*sandboxState {
	out := map[types.UID]*sandboxState{}
	files, _ := filepath.Glob(filepath.Join(a.o.StateDir, "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var s sandboxState
		if json.Unmarshal(b, &s) == nil && s.UID != "" {
			out[s.UID] = &s
		}
	}
	// The workers take records out of a.adopt as they adopt them, while
	// cleanupOrphans reads what was recorded: each gets its own map (one
	// map would be a concurrent read and write, and would hide from the
	// clean-up the records already taken).
	a.mu.Lock()
	a.adopt = maps.Clone(out)
	a.mu.Unlock()
	return out
}

// cleanupOrphans tears down sandboxes whose pod is gone from the API, then
// calls CNI GC with the attachments still alive.
func (a *Agent) cleanupOrphans(ctx context.Context, store cache.Store, recorded map[types.UID]*sandboxState) {
	// DEL and GC need the conflist; after a restart it is already there.
	for {
		if _, err := a.cni.confList(); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	a.gcMu.Lock()
	defer a.gcMu.Unlock()
	live := map[types.UID]bool{}
	for _, o := range store.List() {
		live[o.(*corev1.Pod).UID] = true
	}
	var keep []string
	for uid, s := range recorded {
		if live[uid] {
			// A live pod's recorded sandbox stays only while its namespace
			// does: one gone with a reboot is not adopted (the pod gets a
			// new sandbox), so its attachment is not valid any more.
			if s.HostNetwork || netnsExists(s.Netns) {
				keep = append(keep, s.ContainerID)
			}
			continue
		}
		a.log.Info("removing orphaned sandbox", "pod", s.Namespace+"/"+s.Name)
		for _, pid := range s.PIDs {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if !s.HostNetwork {
			pod := &corev1.Pod{}
			pod.Namespace, pod.Name, pod.UID = s.Namespace, s.Name, s.UID
			_ = a.cni.del(ctx, pod, s.ContainerID, netnsutil.Path(s.Netns))
			_ = netnsutil.Delete(s.Netns)
		}
		_ = os.RemoveAll(a.podVolumeDir(uid))
		_ = os.Remove(a.statePath(uid))
	}
	// Sandboxes started since the informer synced are live too.
	a.mu.Lock()
	for _, w := range a.pods {
		if id := w.containerID(); id != "" {
			keep = append(keep, id)
		}
	}
	a.mu.Unlock()
	if err := a.cni.gc(ctx, keep); err != nil {
		a.log.Warn("CNI GC", "err", err)
	} else {
		a.log.Info("CNI GC done", "live", len(keep))
	}
}

func netnsExists(name string) bool {
	_, err := os.Stat(netnsutil.Path(name))
	return err == nil
}
