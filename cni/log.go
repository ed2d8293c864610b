package cni

import (
	"context"
	"log/slog"
	"sync"
)

// lazyAttrs adds attributes to a handler only once a record gets through.
// slog's handlers format attributes as they are added (20-60 µs the first
// time in a process), and a command that succeeds logs nothing at the
// binary's level, so Plugin.logger's attributes were work for nothing.
type lazyAttrs struct {
	base  slog.Handler
	attrs []slog.Attr
	once  sync.Once
	with  slog.Handler
}

func withLazyAttrs(l *slog.Logger, attrs ...slog.Attr) *slog.Logger {
	return slog.New(&lazyAttrs{base: l.Handler(), attrs: attrs})
}

func (l *lazyAttrs) handler() slog.Handler {
	l.once.Do(func() { l.with = l.base.WithAttrs(l.attrs) })
	return l.with
}

func (l *lazyAttrs) Enabled(ctx context.Context, level slog.Level) bool {
	return l.base.Enabled(ctx, level)
}

func (l *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	return l.handler().Handle(ctx, r)
}

func (l *lazyAttrs) WithAttrs(attrs []slog.Attr) slog.Handler { return l.handler().WithAttrs(attrs) }
func (l *lazyAttrs) WithGroup(name string) slog.Handler       { return l.handler().WithGroup(name) }
