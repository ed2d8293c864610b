package nlmsg

import (
	"bytes"
	"testing"
)

// FuzzParse feeds the reply parsers (what the kernel, or anything on the
// other end of a netlink socket, sends) arbitrary bytes: splitting a
// datagram into messages must always make progress and stay inside the
// datagram, and attribute parsing must never read past its input.
func FuzzParse(f *testing.F) {
	var w Writer
	w.Begin(16, 0)
	w.Fixed(make([]byte, 16))
	w.String(3, "nnt0")
	n := w.Nest(18)
	w.Uint32(1, 7)
	w.EndNest(n)
	msg, _ := w.Bytes()
	f.Add(msg)
	f.Add([]byte{4, 0, 1, 0})
	f.Add([]byte{16, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, d []byte) {
		for rest := d; len(rest) > 0; {
			h, body, next, err := Next(rest)
			if err != nil {
				break
			}
			if len(next) >= len(rest) {
				t.Fatalf("no progress splitting %x", rest)
			}
			if int(h.Len) != HeaderLen+len(body) {
				t.Fatalf("body of %d bytes for a message of length %d", len(body), h.Len)
			}
			rest = next
		}
		attrs, err := ParseAttrs(d)
		if err != nil {
			return
		}
		total := 0
		for _, a := range attrs {
			total += AttrHeaderLen + len(a.Value)
			if !bytes.Contains(d, a.Value) {
				t.Fatalf("attribute value %x is not part of the input", a.Value)
			}
		}
		if total > len(d) {
			t.Fatalf("attributes cover %d bytes of %d", total, len(d))
		}
	})
}

// FuzzWriterRoundTrip holds the encoder to the parser: any run of
// attributes (types and values cut from the fuzz input, nested or not)
// written by Writer parses back to the same types and values.
func FuzzWriterRoundTrip(f *testing.F) {
	f.Add([]byte{1, 3, 'a', 'b', 'c', 2, 0, 0x83, 4, 1, 2, 3, 4})
	f.Add([]byte{0xff, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		type attr struct {
			typ    uint16
			val    []byte
			nested bool
		}
		var want []attr
		for len(in) >= 2 {
			typ, l := uint16(in[0]&0x7f), int(in[1])
			nested := in[0]&0x80 != 0
			in = in[2:]
			l = min(l, len(in))
			want = append(want, attr{typ: typ, val: in[:l], nested: nested})
			in = in[l:]
		}
		var w Writer
		w.Begin(16, 0)
		for _, a := range want {
			if a.nested {
				n := w.Nest(a.typ)
				w.Attr(a.typ, a.val)
				w.EndNest(n)
				continue
			}
			w.Attr(a.typ, a.val)
		}
		b, err := w.Bytes()
		if err != nil {
			t.Fatalf("Bytes: %v", err)
		}
		h, body, rest, err := Next(b)
		if err != nil || len(rest) != 0 || int(h.Len) != len(b) {
			t.Fatalf("one message expected: len %d of %d, rest %d, err %v", h.Len, len(b), len(rest), err)
		}
		got, err := ParseAttrs(body)
		if err != nil {
			t.Fatalf("own message refused: %v", err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d attributes written, %d parsed", len(want), len(got))
		}
		for i, a := range want {
			v := got[i].Value
			if a.nested {
				inner, err := ParseAttrs(v)
				if err != nil || len(inner) != 1 {
					t.Fatalf("nested attribute %d: %v (%d inside)", i, err, len(inner))
				}
				v = inner[0].Value
			}
			if got[i].Type != a.typ || !bytes.Equal(v, a.val) {
				t.Fatalf("attribute %d: wrote %d=%x, parsed %d=%x", i, a.typ, a.val, got[i].Type, v)
			}
		}
	})
}
