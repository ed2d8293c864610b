package nlmsg

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Netlink's framing (linux/netlink.h).
const (
	// HeaderLen is the length of struct nlmsghdr.
	HeaderLen = unix.SizeofNlMsghdr
	// AttrHeaderLen is the length of struct nlattr.
	AttrHeaderLen = unix.SizeofRtAttr
	// alignTo is NLMSG_ALIGNTO and NLA_ALIGNTO.
	alignTo = 4
	// maxAttrLen is what an attribute's 16-bit length can say.
	maxAttrLen = 0xffff
)

var native = binary.NativeEndian

func align(n int) int { return (n + alignTo - 1) &^ (alignTo - 1) }

// Writer builds netlink messages back to back in one buffer, the bytes of
// one write to the kernel. Begin starts a message; what follows (Fixed,
// Attr, Nest...) is its body; the next Begin, or handing the Writer to
// Conn.Execute, ends it. Sequence numbers are left to Conn.Execute, which
// numbers the messages as it sends them. A zero Writer is empty and ready.
type Writer struct {
	buf  []byte
	msgs []message
	err  error
}

// message is what Execute needs to know of one message in the buffer.
type message struct {
	start int    // offset of its header in buf
	flags uint16 // its header's flags
	// tolerate is an errno that counts as success for this message (0:
	// none).
	tolerate unix.Errno
}

// awaitsAnswer reports whether the kernel answers the message in any
// case: with an acknowledgement (NLM_F_ACK) or, for a dump, NLMSG_DONE.
// Other messages are answered only if they fail.
func (m message) awaitsAnswer() bool {
	return m.flags&unix.NLM_F_ACK != 0 || m.flags&unix.NLM_F_DUMP == unix.NLM_F_DUMP
}

// Begin starts a message of type typ; NLM_F_REQUEST is added to flags. A
// message with NLM_F_ACK, or a dump (NLM_F_DUMP, which is NLM_F_ROOT |
// NLM_F_MATCH), is waited for by Execute; every other message only if it
// fails. (So a message must not carry both bits of NLM_F_DUMP in another
// meaning — NLM_F_REPLACE|NLM_F_EXCL, NLM_F_NONREC|NLM_F_BULK — without
// NLM_F_ACK.)
func (w *Writer) Begin(typ, flags uint16) {
	w.end()
	w.msgs = append(w.msgs, message{start: len(w.buf), flags: flags | unix.NLM_F_REQUEST})
	w.buf = native.AppendUint32(w.buf, 0) // length, set when the message ends
	w.buf = native.AppendUint16(w.buf, typ)
	w.buf = native.AppendUint16(w.buf, flags|unix.NLM_F_REQUEST)
	w.buf = native.AppendUint32(w.buf, 0) // sequence number, set by Execute
	w.buf = native.AppendUint32(w.buf, 0) // port id: 0 addresses the kernel
}

// Tolerate makes errno count as success for the current message: Execute
// does not report it.
func (w *Writer) Tolerate(errno unix.Errno) {
	if len(w.msgs) > 0 {
		w.msgs[len(w.msgs)-1].tolerate = errno
	}
}

// Fixed appends b, the family's fixed header (ifinfomsg, nfgenmsg...),
// padded to netlink's alignment.
func (w *Writer) Fixed(b []byte) {
	w.buf = append(w.buf, b...)
	w.pad()
}

// Attr appends an attribute, padded to netlink's alignment.
func (w *Writer) Attr(typ uint16, val []byte) {
	if AttrHeaderLen+len(val) > maxAttrLen {
		w.fail(fmt.Errorf("netlink attribute %d: value of %d bytes is too long", typ, len(val)))
		return
	}
	w.buf = native.AppendUint16(w.buf, uint16(AttrHeaderLen+len(val)))
	w.buf = native.AppendUint16(w.buf, typ)
	w.buf = append(w.buf, val...)
	w.pad()
}

// Uint32 appends an attribute holding v in host byte order.
func (w *Writer) Uint32(typ uint16, v uint32) {
	var b [4]byte
	native.PutUint32(b[:], v)
	w.Attr(typ, b[:])
}

// String appends an attribute holding s and a terminating NUL, as the
// kernel wants names.
func (w *Writer) String(typ uint16, s string) {
	if AttrHeaderLen+len(s)+1 > maxAttrLen {
		w.fail(fmt.Errorf("netlink attribute %d: string of %d bytes is too long", typ, len(s)))
		return
	}
	w.buf = native.AppendUint16(w.buf, uint16(AttrHeaderLen+len(s)+1))
	w.buf = native.AppendUint16(w.buf, typ)
	w.buf = append(w.buf, s...)
	w.buf = append(w.buf, 0)
	w.pad()
}

// Nest starts a nested attribute: the attributes appended until EndNest
// (with what Nest returned) are its value. typ is written as given; add
// unix.NLA_F_NESTED where the family wants it flagged.
func (w *Writer) Nest(typ uint16) int {
	start := len(w.buf)
	w.buf = native.AppendUint16(w.buf, 0) // length, set by EndNest
	w.buf = native.AppendUint16(w.buf, typ)
	return start
}

// EndNest ends the nested attribute Nest started at start.
func (w *Writer) EndNest(start int) {
	l := len(w.buf) - start
	if l > maxAttrLen {
		w.fail(fmt.Errorf("netlink nested attribute of %d bytes is too long", l))
		return
	}
	native.PutUint16(w.buf[start:], uint16(l))
}

// Len is the number of bytes written so far.
func (w *Writer) Len() int { return len(w.buf) }

// Count is the number of messages begun.
func (w *Writer) Count() int { return len(w.msgs) }

// Bytes ends the current message and returns the buffer (numbered with
// zeros until Execute numbers it), or the first encoding problem, such as
// an attribute longer than netlink can express.
func (w *Writer) Bytes() ([]byte, error) {
	w.end()
	return w.buf, w.err
}

// Reset empties the Writer, keeping its buffer for reuse.
func (w *Writer) Reset() {
	w.buf, w.msgs, w.err = w.buf[:0], w.msgs[:0], nil
}

// end sets the length of the current message.
func (w *Writer) end() {
	if len(w.msgs) == 0 {
		return
	}
	m := w.msgs[len(w.msgs)-1]
	native.PutUint32(w.buf[m.start:], uint32(len(w.buf)-m.start))
}

// number gives the messages the sequence numbers first, first+1, ...
func (w *Writer) number(first uint32) {
	for i, m := range w.msgs {
		native.PutUint32(w.buf[m.start+8:], first+uint32(i))
	}
}

func (w *Writer) pad() {
	for len(w.buf)%alignTo != 0 {
		w.buf = append(w.buf, 0)
	}
}

func (w *Writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}
