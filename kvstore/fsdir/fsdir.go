// Package fsdir owns the on-disk layout of the KV store's shared-file-
// system DISK replicas (mooncake_master --root_fs_dir): where an object's
// file lives under <root_fs_dir>/<cluster_id>, and the confined file
// operations the master and the clients use on it. Every path handed to
// these operations is relative, checked by ValidRelPath, and opened one
// component at a time with O_NOFOLLOW, so a symbolic link planted in the
// shared directory never leads outside it.
package fsdir

import (
	"errors"
	"fmt"
	"hash/fnv"
	"path"
	"strconv"
	"strings"
)

// maxNameKey bounds the part of a file name taken from the key, so that
// name and suffix stay under the usual 255-byte limit.
const maxNameKey = 200

// SanitizeFileName makes s usable as one file name component: the
// characters / \ : * ? " < > | and NUL become '_' (as upstream), and so do
// the other control characters; a leading '.' becomes "_." so that no name
// is "." or ".." or starts like the writers' temporary files; an empty s
// is "_". At most 200 bytes of s are kept.
func SanitizeFileName(s string) string {
	b := []byte(s)
	if len(b) > maxNameKey {
		b = b[:maxNameKey]
	}
	for i, c := range b {
		if c < 0x20 || c == 0x7f || strings.IndexByte(`/\:*?"<>|`, c) >= 0 {
			b[i] = '_'
		}
	}
	if len(b) == 0 || b[0] == '.' {
		b = append([]byte{'_'}, b...)
	}
	return string(b)
}

// Dir is the directory a cluster's DISK replicas live under:
// <root>/<sanitized cluster id>.
func Dir(root, clusterID string) string {
	return path.Join(root, SanitizeFileName(clusterID))
}

// RelPath is the path, relative to Dir, of the file that write number id
// of key goes to: <c1>/<c2>/<sanitized key>.<id>, c1 and c2 letters a..p
// from the FNV-1a hash of the key (upstream uses std::hash; any
// deterministic hash will do). The id keeps apart keys that sanitize
// alike ("a/b" and "a_b") and successive writes of one key, so deleting
// an old version never hits a newer one.
func RelPath(key string, id uint64) string {
	h := fnv.New64a()
	h.Write([]byte(key))
	sum := h.Sum64()
	c1 := string(rune('a' + sum&0xF))
	c2 := string(rune('a' + (sum>>4)&0xF))
	return c1 + "/" + c2 + "/" + SanitizeFileName(key) + "." + strconv.FormatUint(id, 10)
}

// ErrBadPath is returned for a relative path that RelPath cannot have
// made.
var ErrBadPath = errors.New("fsdir: not a DISK replica path")

// ValidRelPath checks that rel has RelPath's shape: two one-letter
// directories a..p and a file name of at most 255 bytes with no
// separator, control character or leading dot. It is what a client
// applies to the path a master's replica descriptor names.
func ValidRelPath(rel string) error {
	parts := strings.Split(rel, "/")
	if len(parts) != 3 {
		return fmt.Errorf("%w: %q", ErrBadPath, rel)
	}
	for _, d := range parts[:2] {
		if len(d) != 1 || d[0] < 'a' || d[0] > 'p' {
			return fmt.Errorf("%w: %q", ErrBadPath, rel)
		}
	}
	name := parts[2]
	if name == "" || len(name) > 255 || name[0] == '.' {
		return fmt.Errorf("%w: %q", ErrBadPath, rel)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == 0x7f || strings.IndexByte(`/\:*?"<>|`, c) >= 0 {
			return fmt.Errorf("%w: %q", ErrBadPath, rel)
		}
	}
	return nil
}
