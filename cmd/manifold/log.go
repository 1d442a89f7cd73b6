package main

import (
	"io"
	"log/slog"

	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/manifold-cni/manifold/netconf"
)

// newLogger builds the logger of one call (DESIGN §8): JSON lines to logFile with
// size-based rotation, to stderr when logToStderr is set or there is no logFile,
// never to stdout, which carries the CNI result.
func newLogger(conf *netconf.Config, stderr io.Writer) (*slog.Logger, func()) {
	level, _ := netconf.ParseLogLevel(conf.LogLevel) // validated by ParseConfig
	var writers []io.Writer
	closeFn := func() {}
	if conf.LogFile != "" {
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
		writers = append(writers, lj)
		closeFn = func() { lj.Close() }
	}
	if conf.LogToStderr || conf.LogFile == "" {
		writers = append(writers, stderr)
	}
	h := slog.NewJSONHandler(io.MultiWriter(writers...), &slog.HandlerOptions{Level: level})
	return slog.New(h), closeFn
}
