// Package logging configures log/slog for Mooncake-Go processes and
// libraries from MC_LOG_LEVEL, as upstream: 0 info (default), 1 warning,
// 2 error; -1 adds debug messages.
package logging

import (
	"log/slog"
	"os"
	"strings"
)

// Level is the level MC_LOG_LEVEL asks for.
func Level() slog.Level {
	switch strings.TrimSpace(os.Getenv("MC_LOG_LEVEL")) {
	case "-1":
		return slog.LevelDebug
	case "1":
		return slog.LevelWarn
	case "2":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Setup makes a text handler on stderr at Level the default logger.
func Setup() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: Level()})))
}
