package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/nodenet/nodenet/cni/protocol"
)

// execDelegate runs a flannel delegate that is not a bridge (ipvlan, ptp,
// ...) as its own binary from CNI_PATH, as upstream flannel does for every
// delegate. (libcni's invoke package would do, but it links net/http and
// OpenTelemetry, which would double the binary for a path few use.)
func execDelegate(ctx context.Context, command, typ string, conf []byte, args *protocol.CmdArgs) (*protocol.Result, error) {
	path, err := findPlugin(typ, args.Path)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidConfig, "delegate %q: %w", typ, err)
	}
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = append(os.Environ(),
		"CNI_COMMAND="+command, "CNI_CONTAINERID="+args.ContainerID, "CNI_NETNS="+args.Netns,
		"CNI_ARGS="+args.Args, "CNI_IFNAME="+args.IfName, "CNI_PATH="+args.Path)
	cmd.Stdin = bytes.NewReader(conf)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		var te protocol.WireError
		if json.Unmarshal(out, &te) == nil && te.Code != 0 {
			return nil, fmt.Errorf("delegate %s %s: %w", typ, command, &te)
		}
		return nil, fmt.Errorf("delegate %s %s: %w: %s", typ, command, err, out)
	}
	if command != "ADD" {
		return nil, nil
	}
	var cv struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(conf, &cv); err != nil {
		return nil, protocol.Errorf(protocol.CodeDecode, "delegate configuration: %w", err)
	}
	var res protocol.Result
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, protocol.Errorf(protocol.CodeDecode, "delegate %s result: %w", typ, err)
	}
	// The result goes on to the runtime in the configuration's version.
	res.CNIVersion = cv.CNIVersion
	return &res, nil
}

func findPlugin(typ, cniPath string) (string, error) {
	if typ == "" || filepath.Base(typ) != typ {
		return "", fmt.Errorf("invalid plugin name %q", typ)
	}
	for _, dir := range filepath.SplitList(cniPath) {
		p := filepath.Join(dir, typ)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", errors.New("not found in CNI_PATH " + cniPath)
}

// withPrevResult adds prevResult to a cached delegate configuration, which
// CHECK must pass on.
func withPrevResult(conf []byte, prev json.RawMessage) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		return nil, protocol.Errorf(protocol.CodeDecode, "decode delegate configuration: %w", err)
	}
	m["prevResult"] = prev
	return json.Marshal(m)
}
