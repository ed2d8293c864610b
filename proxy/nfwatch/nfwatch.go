package nfwatch

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/internal/nlmsg"
	"github.com/nodenet/nodenet/proxy"
)

// Table names one nf_tables table: its family (unix.NFPROTO_IPV4 for
// "ip", unix.NFPROTO_IPV6 for "ip6", unix.NFPROTO_INET...) and name.
type Table struct {
	Family uint8
	Name   string
}

// Messages x/sys does not name (kernel 6.3+). The kernel announces a
// destroy as the matching delete today; they are here so a kernel that
// starts announcing them as such is not missed.
const (
	msgDestroyTable     = 0x1a
	msgDestroyChain     = 0x1b
	msgDestroyRule      = 0x1c
	msgDestroySet       = 0x1d
	msgDestroySetElem   = 0x1e
	msgDestroyObj       = 0x1f
	msgDestroyFlowtable = 0x20
)

// deletion reports whether an nf_tables message type announces that
// something was removed.
func deletion(msg uint16) bool {
	switch msg {
	case unix.NFT_MSG_DELTABLE, unix.NFT_MSG_DELCHAIN, unix.NFT_MSG_DELRULE,
		unix.NFT_MSG_DELSET, unix.NFT_MSG_DELSETELEM, unix.NFT_MSG_DELOBJ,
		unix.NFT_MSG_DELFLOWTABLE,
		msgDestroyTable, msgDestroyChain, msgDestroyRule, msgDestroySet,
		msgDestroySetElem, msgDestroyObj, msgDestroyFlowtable:
		return true
	}
	return false
}

// tableAttr is the attribute that names the table in every message
// deletion accepts (NFTA_TABLE_NAME, NFTA_CHAIN_TABLE, NFTA_RULE_TABLE,
// NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE, NFTA_OBJ_TABLE,
// NFTA_FLOWTABLE_TABLE are all 1).
const tableAttr = 1

// nfgenmsgLen is the size of struct nfgenmsg, the fixed header of every
// nfnetlink message body: family, version, resource id.
const nfgenmsgLen = 4

// Watcher holds a socket subscribed to nf_tables notifications.
type Watcher struct {
	fd     int
	tables map[Table]bool
}

// Open subscribes to nf_tables notifications in the network namespace
// netns (a name `ip netns` knows or a path; "" is the caller's own) about
// tables. The socket stays in that namespace whatever thread reads it.
func Open(netns string, tables ...Table) (*Watcher, error) {
	if len(tables) == 0 {
		return nil, errors.New("watch nf_tables: no table to watch")
	}
	fd := -1
	open := func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
		if err != nil {
			return fmt.Errorf("open nfnetlink socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind nfnetlink socket: %w", err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, unix.NFNLGRP_NFTABLES); err != nil {
			unix.Close(fd)
			return fmt.Errorf("join nf_tables notification group: %w", err)
		}
		return nil
	}
	var err error
	if path := netnsutil.Path(netns); path != "" {
		err = netnsutil.Do(path, open)
	} else {
		err = open()
	}
	if err != nil {
		return nil, fmt.Errorf("watch nf_tables in %q: %w", netns, err)
	}
	w := &Watcher{fd: fd, tables: map[Table]bool{}}
	for _, t := range tables {
		w.tables[t] = true
	}
	return w, nil
}

// Run reads notifications until ctx ends and calls deleted after each
// datagram that announced a deletion in a watched table, and after the
// kernel dropped notifications because the socket's buffer was full
// (what was dropped may have been one). It closes the socket before it
// returns; it returns nil when ctx ended, else the socket's failure.
func (w *Watcher) Run(ctx context.Context, deleted func()) error {
	defer unix.Close(w.fd)
	// ctx's end wakes the poll through a pipe: no periodic wake-ups
	// while nothing happens.
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("watch nf_tables: %w", err)
	}
	defer unix.Close(wake[0])
	stop := context.AfterFunc(ctx, func() { unix.Close(wake[1]) })
	defer func() {
		if stop() {
			unix.Close(wake[1])
		}
	}()
	buf := make([]byte, os.Getpagesize()*8)
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}, {Fd: int32(wake[0]), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("watch nf_tables: poll: %w", err)
		}
		if ctx.Err() != nil {
			return nil
		}
		for {
			n, _, err := unix.Recvfrom(w.fd, buf, 0)
			switch {
			case errors.Is(err, unix.EAGAIN):
			case errors.Is(err, unix.ENOBUFS):
				deleted()
				continue
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				return fmt.Errorf("watch nf_tables: receive: %w", err)
			case w.matches(buf[:n]):
				deleted()
				continue
			default:
				continue
			}
			break
		}
	}
}

// matches reports whether a datagram holds a deletion in a watched table.
// A malformed datagram counts as one: the check it costs is cheap, a
// missed deletion is not.
func (w *Watcher) matches(d []byte) bool {
	for len(d) > 0 {
		h, body, rest, err := nlmsg.Next(d)
		if err != nil {
			return true
		}
		if h.Type>>8 == unix.NFNL_SUBSYS_NFTABLES && deletion(h.Type&0xff) {
			if len(body) < nfgenmsgLen {
				return true
			}
			if w.tables[Table{Family: body[0], Name: tableName(body[nfgenmsgLen:])}] {
				return true
			}
		}
		d = rest
	}
	return false
}

// tableName is the table attribute's value ("" when absent or malformed).
func tableName(attrs []byte) string {
	as, err := nlmsg.ParseAttrs(attrs)
	if err != nil {
		return ""
	}
	for _, a := range as {
		if a.Type == tableAttr {
			return nlmsg.String(a.Value)
		}
	}
	return ""
}

// Tables names the tables called names of the nf_tables family that
// holds family's rules ("ip" or "ip6").
func Tables(family proxy.Family, names ...string) []Table {
	fam := uint8(unix.NFPROTO_IPV4)
	if family == proxy.IPv6 {
		fam = unix.NFPROTO_IPV6
	}
	out := make([]Table, len(names))
	for i, n := range names {
		out[i] = Table{Family: fam, Name: n}
	}
	return out
}

// Watch is Open then Run: what a data plane's proxy.ChangeWatcher does.
func Watch(ctx context.Context, netns string, tables []Table, deleted func()) error {
	w, err := Open(netns, tables...)
	if err != nil {
		return err
	}
	return w.Run(ctx, deleted)
}
