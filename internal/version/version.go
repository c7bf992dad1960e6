// Package version holds Mooncake-Go's version: the one string that the
// library's mc_version, the Python distribution (pyproject.toml reads the
// constant below) and the master's /status endpoint report.
package version

// version is the release version; pyproject.toml reads this line.
const version = "0.1.0"

// String returns the version.
func String() string { return version }
