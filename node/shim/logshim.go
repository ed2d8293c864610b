package shim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// maxLogLine is where a long line is split into partial records, as the
// CRI runtimes do (containerd: 16 KiB).
const maxLogLine = 16 << 10

// CRILine formats one record of the CRI log format the kubelet reads:
// "<RFC3339Nano time> <stdout|stderr> <F|P> <content>\n", F for a full
// line, P for a piece of a longer one.
func CRILine(t time.Time, stream string, full bool, content []byte) []byte {
	tag := "P"
	if full {
		tag = "F"
	}
	b := fmt.Appendf(nil, "%s %s %s ", t.UTC().Format(time.RFC3339Nano), stream, tag)
	b = append(b, content...)
	return append(b, '\n')
}

// RunLogShim runs argv with its output recorded in logPath as CRI log
// lines, forwards SIGTERM/SIGINT/SIGHUP to it, and returns the exit code
// the agent reports for the container (128+signal when it was killed).
// The agent starts it in the pod's namespace as the container's process.
// With mounts, argv runs in a private mount namespace with the volumes
// bound: ExecWithMounts, reached by running self (the command line that
// re-enters Main in this binary) with --exec.
func RunLogShim(self []string, logPath string, mounts []Mount, argv []string) int {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "logshim: no command")
		return 127
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "logshim: open log: %v\n", err)
		return 127
	}
	defer f.Close()
	var mu sync.Mutex
	write := func(stream string, full bool, content []byte) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = f.Write(CRILine(time.Now(), stream, full, content))
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(mounts) > 0 {
		stage, err := ExecStage(self, mounts, argv)
		if err != nil {
			write("stderr", true, fmt.Appendf(nil, "logshim: %v", err))
			return 127
		}
		cmd = exec.Command(stage[0], stage[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	}
	outR, outW, err1 := os.Pipe()
	errR, errW, err2 := os.Pipe()
	if err := errors.Join(err1, err2); err != nil {
		write("stderr", true, fmt.Appendf(nil, "logshim: pipe: %v", err))
		return 127
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		write("stderr", true, fmt.Appendf(nil, "start %s: %v", argv[0], err))
		return 127
	}
	outW.Close()
	errW.Close()
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	var wg sync.WaitGroup
	for stream, r := range map[string]io.Reader{"stdout": outR, "stderr": errR} {
		wg.Go(func() { copyLines(r, func(full bool, b []byte) { write(stream, full, b) }) })
	}
	wg.Wait()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 0
}

// copyLines cuts r into lines (without the newline), splitting lines
// longer than maxLogLine; full is false for every piece but a line's last.
func copyLines(r io.Reader, emit func(full bool, b []byte)) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			emit(true, line[:len(line)-1])
		case errors.Is(err, bufio.ErrBufferFull):
			emit(false, line)
		default:
			if len(line) > 0 {
				emit(false, line) // output ended without a newline
			}
			return
		}
	}
}
