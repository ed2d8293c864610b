package iptables

import "bytes"

// Batch accumulates one iptables-restore --noflush input, so that a change
// of any size is one command and one transaction. Within a table it orders
// what the kernel needs regardless of the order of calls: chain
// declarations (which create or flush), rule deletions, rule additions,
// chain deletions — so a rule can jump to a chain declared later, and a
// chain is deleted only after the rules referring to it.
type Batch struct {
	tables []*tableBatch // in order of first use
	added  int
}

type tableBatch struct {
	name                     string
	declare, del, add, chdel bytes.Buffer
}

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{} }

func (b *Batch) table(name string) *tableBatch {
	for _, t := range b.tables {
		if t.name == name {
			return t
		}
	}
	t := &tableBatch{name: name}
	b.tables = append(b.tables, t)
	return t
}

// Declare creates chain, or flushes it if it exists.
func (b *Batch) Declare(table, chain string) {
	d := &b.table(table).declare
	d.WriteByte(':')
	d.WriteString(chain)
	d.WriteString(" - [0:0]\n")
}

// Append adds rule (iptables-save syntax without "-A CHAIN ") at the end
// of chain.
func (b *Batch) Append(table, chain, rule string) { b.write(&b.table(table).add, "-A ", chain, rule) }

// Insert adds rule at the head of chain.
func (b *Batch) Insert(table, chain, rule string) { b.write(&b.table(table).add, "-I ", chain, rule) }

// Delete removes the first rule of chain equal to rule.
func (b *Batch) Delete(table, chain, rule string) { b.write(&b.table(table).del, "-D ", chain, rule) }

// DeleteChain flushes and deletes chain.
func (b *Batch) DeleteChain(table, chain string) {
	b.Declare(table, chain)
	x := &b.table(table).chdel
	x.WriteString("-X ")
	x.WriteString(chain)
	x.WriteByte('\n')
}

func (b *Batch) write(buf *bytes.Buffer, op, chain, rule string) {
	buf.WriteString(op)
	buf.WriteString(chain)
	buf.WriteByte(' ')
	buf.WriteString(rule)
	buf.WriteByte('\n')
	if op != "-D " {
		b.added++
	}
}

// Added is the number of rules appended or inserted.
func (b *Batch) Added() int { return b.added }

// Empty reports whether the batch would change nothing.
func (b *Batch) Empty() bool {
	for _, t := range b.tables {
		if t.len() > 0 {
			return false
		}
	}
	return true
}

func (t *tableBatch) len() int { return t.declare.Len() + t.del.Len() + t.add.Len() + t.chdel.Len() }

// Bytes is the iptables-restore input: one section per table used, each
// ending with COMMIT.
func (b *Batch) Bytes() []byte {
	n := 0
	for _, t := range b.tables {
		n += t.len() + len(t.name) + 9
	}
	out := bytes.NewBuffer(make([]byte, 0, n))
	for _, t := range b.tables {
		if t.len() == 0 {
			continue
		}
		out.WriteString("*" + t.name + "\n")
		out.Write(t.declare.Bytes())
		out.Write(t.del.Bytes())
		out.Write(t.add.Bytes())
		out.Write(t.chdel.Bytes())
		out.WriteString("COMMIT\n")
	}
	return out.Bytes()
}
