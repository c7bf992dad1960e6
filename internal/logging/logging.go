// Package logging configures log/slog for Mooncake-Go processes and
// libraries from MC_LOG_LEVEL, as upstream: 0 info (default), 1 warning,
// 2 error; -1 adds debug messages. The names DEBUG, INFO, WARNING and ERROR
// work too.
package logging

import (
	"log/slog"
	"os"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// Level is the level MC_LOG_LEVEL asks for.
func Level() slog.Level {
	switch envvars.LogLevel.Value() {
	case "-1", "DEBUG":
		return slog.LevelDebug
	case "1", "WARNING":
		return slog.LevelWarn
	case "2", "ERROR":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Setup makes a text handler on stderr at Level the default logger.
func Setup() { SetupLevel(Level()) }

// SetupLevel makes a text handler on stderr at level the default logger.
func SetupLevel(level slog.Level) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
}

// GlogLevel is the level glog's flags ask for, for binaries that accept
// them as upstream's do: any -v above 0 adds debug messages; otherwise
// --minloglevel 0 is info, 1 warning, 2 and above error.
func GlogLevel(minLogLevel, verbosity int) slog.Level {
	switch {
	case verbosity > 0:
		return slog.LevelDebug
	case minLogLevel <= 0:
		return slog.LevelInfo
	case minLogLevel == 1:
		return slog.LevelWarn
	}
	return slog.LevelError
}
