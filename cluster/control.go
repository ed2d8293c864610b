package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The `up` that owns a cluster takes requests that need its supervisors
// (`nodenet node restart`) on a unix socket in the state directory,
// <dir>/up.sock, mode 0600: only root (the owner of the namespaces) may
// use it. It is plain HTTP: POST /nodes/<node>/restart answers 200 with a
// NodeRestart in JSON once the node is back, else a status and the error.

const controlSocket = "up.sock"

// ControlSocket is the path of the control socket of the cluster in dir.
func ControlSocket(dir string) string { return filepath.Join(dir, controlSocket) }

// maxSocketPath is sun_path's size less its terminating NUL.
const maxSocketPath = 107

// serveControl listens on the control socket until ctx ends. A state
// directory whose path is too long for a socket gets no control socket:
// the cluster runs, only the requests that need it are unavailable.
func (c *Cluster) serveControl(ctx context.Context) error {
	path := ControlSocket(c.cfg.Dir)
	// Bound under a temporary name, made root-only, then renamed into
	// place: at its real path it is never open to anyone but root, not
	// even between the bind (which takes the umask's mode) and the chmod.
	tmp := path + ".new"
	if len(tmp) > maxSocketPath {
		return fmt.Errorf("control socket %s: path longer than %d bytes (a shorter --dir makes `nodenet node restart` available)", path, maxSocketPath-len(".new"))
	}
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("control socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return fmt.Errorf("control socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /nodes/{node}/restart", func(w http.ResponseWriter, r *http.Request) {
		res, err := c.RestartNode(r.Context(), r.PathValue("node"))
		switch {
		case errors.Is(err, errNoNode):
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.Is(err, ErrRestartBusy):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(res)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		go func() { <-ctx.Done(); _ = srv.Close() }()
		_ = srv.Serve(ln)
		_ = os.Remove(path)
	}()
	return nil
}

// RestartNodeVia asks the `up` that owns the cluster in dir to restart
// node (RestartNode) and waits for it.
func RestartNodeVia(ctx context.Context, dir, node string) (NodeRestart, error) {
	var res NodeRestart
	path := ControlSocket(dir)
	if _, err := os.Stat(path); err != nil {
		return res, fmt.Errorf("no running nodenet up for %s: %w", dir, err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://up/nodes/"+node+"/restart", nil)
	if err != nil {
		return res, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return res, fmt.Errorf("ask the cluster's up (%s): %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return res, err
	}
	if resp.StatusCode != http.StatusOK {
		return res, fmt.Errorf("restart %s: %s", node, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return res, fmt.Errorf("restart %s: the answer: %w", node, err)
	}
	return res, nil
}
