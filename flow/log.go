package flow

import (
	"context"
	"io"
	"log/slog"
	"sync"

	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/manifold-cni/manifold/netconf"
)

// newLogger builds the logger of one call (DESIGN §8): JSON lines to logFile with
// size-based rotation, to stderr when logToStderr is set or there is no logFile,
// never to stdout, which carries the CNI result. With files (the daemon), calls
// share one rotating writer per file and the file stays open.
func newLogger(conf *netconf.Config, stderr io.Writer, files *logFiles) (*slog.Logger, func()) {
	level, _ := netconf.ParseLogLevel(conf.LogLevel) // an unknown one is "" now: a warning of ParseConfig
	var writers []io.Writer
	closeFn := func() {}
	if conf.LogFile != "" {
		if files != nil {
			writers = append(writers, files.get(conf))
		} else {
			lj := rotatingFile(conf)
			writers = append(writers, lj)
			closeFn = func() { lj.Close() }
		}
	}
	if conf.LogToStderr || conf.LogFile == "" {
		writers = append(writers, stderr)
	}
	out := io.MultiWriter(writers...)
	h := &configWarnings{Handler: slog.NewJSONHandler(out, &slog.HandlerOptions{Level: level}),
		always: slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn})}
	return slog.New(h), closeFn
}

// configWarnings writes the lines about the config's own problems
// (logConfigWarnings) whatever the level: the admin whose logLevel is a
// typo must read about it at the default level, error.
type configWarnings struct {
	slog.Handler
	always slog.Handler
}

// configProblem is the message of those lines.
const configProblem = "config problem worked around"

func (h *configWarnings) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, l) || h.always.Enabled(ctx, l)
}

func (h *configWarnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == configProblem {
		return h.always.Handle(ctx, r)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *configWarnings) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &configWarnings{Handler: h.Handler.WithAttrs(attrs), always: h.always.WithAttrs(attrs)}
}

func (h *configWarnings) WithGroup(name string) slog.Handler {
	return &configWarnings{Handler: h.Handler.WithGroup(name), always: h.always.WithGroup(name)}
}

// logConfigWarnings logs each problem of the config that the call works
// around (netconf.Config.Warnings), as a warning that is written at every
// logLevel.
func logConfigWarnings(log *slog.Logger, conf *netconf.Config) {
	for _, w := range conf.Warnings {
		log.Warn(configProblem, "problem", w)
	}
}

func rotatingFile(conf *netconf.Config) *lumberjack.Logger {
	lj := &lumberjack.Logger{Filename: conf.LogFile, MaxSize: 100}
	if o := conf.LogOptions; o != nil {
		if o.MaxAge != nil {
			lj.MaxAge = *o.MaxAge
		}
		if o.MaxSize != nil {
			lj.MaxSize = *o.MaxSize
		}
		if o.MaxBackups != nil {
			lj.MaxBackups = *o.MaxBackups
		}
		if o.Compress != nil {
			lj.Compress = *o.Compress
		}
	}
	return lj
}

// logFiles is the daemon's set of open log files. Two rotating writers on one
// file would rotate it under each other, so there is one per file name, made
// with the logOptions of the first config that names it.
type logFiles struct {
	mu    sync.Mutex
	files map[string]*lumberjack.Logger
}

func (l *logFiles) get(conf *netconf.Config) *lumberjack.Logger {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lj, ok := l.files[conf.LogFile]; ok {
		return lj
	}
	if l.files == nil {
		l.files = map[string]*lumberjack.Logger{}
	}
	lj := rotatingFile(conf)
	l.files[conf.LogFile] = lj
	return lj
}
