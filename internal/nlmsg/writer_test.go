package nlmsg

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The byte sequences in these tests are written out by hand, for a
// little-endian host (netlink uses host byte order).
func requireLittleEndian(t *testing.T) {
	t.Helper()
	var b [2]byte
	native.PutUint16(b[:], 1)
	if b[0] != 1 {
		t.Skip("the expected byte sequences are written for little-endian hosts")
	}
}

func TestWriterMessage(t *testing.T) {
	requireLittleEndian(t)
	var w Writer
	w.Begin(unix.RTM_NEWLINK, unix.NLM_F_ACK|unix.NLM_F_CREATE)
	w.Fixed([]byte{0, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0}) // ifinfomsg: index 7, IFF_UP of IFF_UP
	w.String(unix.IFLA_IFNAME, "br0")                               // 3 bytes + NUL: no padding
	w.Attr(unix.IFLA_ADDRESS, []byte{0x0a, 0x58, 1, 2, 3, 4})       // 6 bytes: 2 of padding
	w.Uint32(unix.IFLA_MTU, 1450)
	info := w.Nest(unix.IFLA_LINKINFO)
	w.Attr(unix.IFLA_INFO_KIND, []byte("bridge")) // no NUL: 6 bytes, padded
	w.EndNest(info)
	got, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		76, 0, 0, 0, // length
		16, 0, // RTM_NEWLINK
		0x05, 0x04, // NLM_F_REQUEST|NLM_F_ACK (0x005), NLM_F_CREATE (0x400)
		0, 0, 0, 0, // sequence number: Execute's
		0, 0, 0, 0, // port id
		0, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0,
		8, 0, 3, 0, 'b', 'r', '0', 0,
		10, 0, 1, 0, 0x0a, 0x58, 1, 2, 3, 4, 0, 0,
		8, 0, 4, 0, 0xaa, 0x05, 0, 0,
		16, 0, 18, 0, // IFLA_LINKINFO, length including the padded kind
		10, 0, 1, 0, 'b', 'r', 'i', 'd', 'g', 'e', 0, 0,
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("message\n got %v\nwant %v", got, want)
	}
	if w.Count() != 1 || w.Len() != len(want) {
		t.Fatalf("Count %d Len %d", w.Count(), w.Len())
	}
}

// TestWriterBatch: messages back to back, each with its own length, an
// odd-sized fixed header padded, a flagged nest inside a nest, and the
// numbering Execute applies.
func TestWriterBatch(t *testing.T) {
	requireLittleEndian(t)
	var w Writer
	w.Begin(0x10, 0)
	w.Fixed([]byte{2, 0, 0}) // 3 bytes: padded to 4
	w.Begin(0x0a0c, unix.NLM_F_ACK)
	outer := w.Nest(3 | unix.NLA_F_NESTED)
	inner := w.Nest(1 | unix.NLA_F_NESTED)
	w.Attr(1, []byte{0xc0, 0xa8, 0, 1})
	w.EndNest(inner)
	w.EndNest(outer)
	w.Begin(0x11, 0)
	w.number(41)
	got, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		20, 0, 0, 0, 0x10, 0, 0x01, 0, 41, 0, 0, 0, 0, 0, 0, 0,
		2, 0, 0, 0,
		32, 0, 0, 0, 0x0c, 0x0a, 0x05, 0, 42, 0, 0, 0, 0, 0, 0, 0,
		16, 0, 3, 0x80,
		12, 0, 1, 0x80,
		8, 0, 1, 0, 0xc0, 0xa8, 0, 1,
		16, 0, 0, 0, 0x11, 0, 0x01, 0, 43, 0, 0, 0, 0, 0, 0, 0,
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("batch\n got %v\nwant %v", got, want)
	}
	w.Reset()
	if b, err := w.Bytes(); len(b) != 0 || err != nil || w.Count() != 0 {
		t.Fatalf("after Reset: %v %v %d", b, err, w.Count())
	}
}

func TestWriterTooLong(t *testing.T) {
	var w Writer
	w.Begin(1, 0)
	w.Attr(1, make([]byte, 0xffff))
	if _, err := w.Bytes(); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("attribute longer than 64 KiB: %v", err)
	}
	w.Reset()
	w.Begin(1, 0)
	n := w.Nest(1)
	for range 20 {
		w.Attr(2, make([]byte, 4000))
	}
	w.EndNest(n)
	if _, err := w.Bytes(); err == nil {
		t.Fatal("nested attribute longer than 64 KiB accepted")
	}
	w.Reset()
	w.Begin(1, 0)
	w.String(1, strings.Repeat("x", 0xfffb))
	if _, err := w.Bytes(); err == nil {
		t.Fatal("string attribute longer than 64 KiB accepted")
	}
}

func TestParseAttrs(t *testing.T) {
	requireLittleEndian(t)
	b := []byte{
		8, 0, 3, 0, 'e', 't', 'h', 0, // IFLA_IFNAME
		5, 0, 0x12, 0x80, 9, 0, 0, 0, // nested flag masked off; 1 byte + padding
		8, 0, 4, 0x40, 0xaa, 0x05, 0, 0, // byte-order flag masked off
		6, 0, 7, 0, 1, 2, // last one without padding
	}
	attrs, err := ParseAttrs(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []Attr{{3, []byte("eth\x00")}, {0x12, []byte{9}}, {4, []byte{0xaa, 5, 0, 0}}, {7, []byte{1, 2}}}
	if len(attrs) != len(want) {
		t.Fatalf("got %v", attrs)
	}
	for i := range want {
		if attrs[i].Type != want[i].Type || !bytes.Equal(attrs[i].Value, want[i].Value) {
			t.Errorf("attribute %d: %+v, want %+v", i, attrs[i], want[i])
		}
	}
	if String(attrs[0].Value) != "eth" || String([]byte("no-nul")) != "no-nul" || Uint32(attrs[2].Value) != 1450 || Uint32([]byte{1}) != 0 {
		t.Error("value readers")
	}
	if a, err := ParseAttrs([]byte{8, 0, 1, 0, 1, 2, 3, 4, 0, 0}); err != nil || len(a) != 1 {
		t.Errorf("trailing bytes shorter than a header: %v %v", a, err)
	}
	for _, bad := range [][]byte{{3, 0, 1, 0}, {12, 0, 1, 0, 1, 2, 3, 4}} {
		if _, err := ParseAttrs(bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TestRoundTrip: what the Writer writes, ParseAttrs reads back.
func TestRoundTrip(t *testing.T) {
	var w Writer
	w.Begin(1, 0)
	w.Uint32(5, 0xdeadbeef)
	n := w.Nest(6)
	w.String(1, "veth")
	w.EndNest(n)
	b, _ := w.Bytes()
	attrs, err := ParseAttrs(b[HeaderLen:])
	if err != nil || len(attrs) != 2 || Uint32(attrs[0].Value) != 0xdeadbeef {
		t.Fatalf("%v %v", attrs, err)
	}
	inner, err := ParseAttrs(attrs[1].Value)
	if err != nil || len(inner) != 1 || String(inner[0].Value) != "veth" {
		t.Fatalf("nested %v %v", inner, err)
	}
	if binary.NativeEndian.Uint32(b) != uint32(len(b)) {
		t.Fatal("message length")
	}
}
