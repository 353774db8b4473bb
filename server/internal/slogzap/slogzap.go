// Package slogzap routes a zap logger into log/slog: NewCore is a
// zapcore.Core that hands every entry it enables to a slog.Handler, so
// that a library logging through zap (etcd's client) logs where the rest
// of the server does (Config.Runtime.Logger). zap's own go.uber.org/zap/exp/zapslog
// goes the other way (a slog.Handler over a zap core).
//
//	lg := zap.New(slogzap.NewCore(logger.Handler(), zapcore.ErrorLevel))
//	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: lg})
package slogzap

import (
	"context"
	"log/slog"
	"slices"

	"go.uber.org/zap/zapcore"
)

// NewCore returns a core that writes the entries at or above enab's level
// (and that h enables) to h as slog records: the message, zap's level
// mapped to slog's (DPanic, Panic and Fatal are Error), the entry's time,
// the logger's name as "logger" and its caller as "caller" (when zap
// records them), then the fields, those of With first. Fields are
// encoded as zap would encode them to a map (an error field becomes the
// string "error"). Safe for concurrent use if h is.
func NewCore(h slog.Handler, enab zapcore.LevelEnabler) zapcore.Core {
	return &core{h: h, enab: enab}
}

type core struct {
	h     slog.Handler
	enab  zapcore.LevelEnabler
	attrs []slog.Attr // With's fields
}

// Level maps a zap level to slog's.
func Level(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (c *core) Enabled(l zapcore.Level) bool {
	return c.enab.Enabled(l) && c.h.Enabled(context.Background(), Level(l))
}

func (c *core) With(fields []zapcore.Field) zapcore.Core {
	return &core{h: c.h, enab: c.enab, attrs: append(slices.Clip(c.attrs), attrs(fields)...)}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *core) Write(e zapcore.Entry, fields []zapcore.Field) error {
	r := slog.NewRecord(e.Time, Level(e.Level), e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	if e.Caller.Defined {
		r.AddAttrs(slog.String("caller", e.Caller.TrimmedPath()))
	}
	r.AddAttrs(c.attrs...)
	r.AddAttrs(attrs(fields)...)
	return c.h.Handle(context.Background(), r)
}

func (c *core) Sync() error { return nil }

// attrs encodes fields as zap's map encoder does, in the fields' order.
func attrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	var keys []string
	for _, f := range fields {
		before := len(enc.Fields)
		f.AddTo(enc)
		if len(enc.Fields) == before {
			continue // a skipped field, or a key already present
		}
		keys = append(keys, f.Key)
	}
	// Some fields add more than their own key (an error adds
	// "errorVerbose" too): those follow, sorted.
	var extra []string
	for k := range enc.Fields {
		if !slices.Contains(keys, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	out := make([]slog.Attr, 0, len(enc.Fields))
	for _, k := range append(keys, extra...) {
		if v, ok := enc.Fields[k]; ok {
			out = append(out, slog.Any(k, v))
		}
	}
	return out
}
