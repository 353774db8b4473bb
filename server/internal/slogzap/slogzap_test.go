package slogzap

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logger returns a zap logger over NewCore at level, writing slog's text
// (without the time) to the returned buffer.
func logger(level zapcore.Level, slogLevel slog.Level) (*zap.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slogLevel, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	return zap.New(NewCore(h, level)), &buf
}

func TestCore(t *testing.T) {
	tests := []struct {
		name      string
		level     zapcore.Level // the core's
		slogLevel slog.Level    // the handler's
		log       func(*zap.Logger)
		want      string
	}{
		{name: "error with fields", level: zapcore.ErrorLevel, slogLevel: slog.LevelInfo,
			log: func(l *zap.Logger) {
				l.Named("etcd").With(zap.String("target", "x:1")).Error("dial failed", zap.Error(errors.New("refused")), zap.Int("attempt", 3))
			},
			want: `level=ERROR msg="dial failed" logger=etcd target=x:1 error=refused attempt=3` + "\n"},
		{name: "warn below the core's level", level: zapcore.ErrorLevel, slogLevel: slog.LevelInfo,
			log: func(l *zap.Logger) { l.Warn("retrying") }},
		{name: "warn at the core's level", level: zapcore.WarnLevel, slogLevel: slog.LevelInfo,
			log:  func(l *zap.Logger) { l.Warn("retrying", zap.Duration("backoff", 0)) },
			want: `level=WARN msg=retrying backoff=0s` + "\n"},
		{name: "info below the handler's level", level: zapcore.DebugLevel, slogLevel: slog.LevelWarn,
			log: func(l *zap.Logger) { l.Info("connected") }},
		{name: "dpanic is error", level: zapcore.DebugLevel, slogLevel: slog.LevelInfo,
			log:  func(l *zap.Logger) { l.DPanic("odd") },
			want: `level=ERROR msg=odd` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, buf := logger(tt.level, tt.slogLevel)
			tt.log(l)
			if got := buf.String(); got != tt.want {
				t.Errorf("logged %q, want %q", got, tt.want)
			}
		})
	}
}

// With's fields stay with the logger they were added to.
func TestWithDoesNotLeak(t *testing.T) {
	l, buf := logger(zapcore.InfoLevel, slog.LevelInfo)
	a := l.With(zap.String("a", "1"))
	b := a.With(zap.String("b", "2"))
	c := a.With(zap.String("c", "3"))
	b.Info("b")
	c.Info("c")
	want := "level=INFO msg=b a=1 b=2\nlevel=INFO msg=c a=1 c=3\n"
	if got := buf.String(); got != want {
		t.Errorf("logged %q, want %q", got, want)
	}
	if strings.Contains(buf.String(), "caller") {
		t.Error("a caller without zap.AddCaller")
	}
}
