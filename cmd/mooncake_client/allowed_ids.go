package main

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
)

// idList is a flag holding user or group ids, written as a comma-separated
// list of numbers or names ("1000,alice", "video"); names are looked up
// when the flag is parsed.
type idList struct {
	ids    *[]uint32
	groups bool // names are group names
}

func (l idList) String() string {
	if l.ids == nil {
		return ""
	}
	s := make([]string, len(*l.ids))
	for i, id := range *l.ids {
		s[i] = strconv.FormatUint(uint64(id), 10)
	}
	return strings.Join(s, ",")
}

func (l idList) Set(v string) error {
	var out []uint32
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		id, err := l.lookup(f)
		if err != nil {
			return err
		}
		out = append(out, id)
	}
	*l.ids = out
	return nil
}

// lookup resolves one entry: a number as it is, else a user's (group's)
// name.
func (l idList) lookup(f string) (uint32, error) {
	if n, err := strconv.ParseUint(f, 10, 32); err == nil {
		return uint32(n), nil
	}
	var id string
	if l.groups {
		g, err := user.LookupGroup(f)
		if err != nil {
			return 0, fmt.Errorf("group %q: %v", f, err)
		}
		id = g.Gid
	} else {
		u, err := user.Lookup(f)
		if err != nil {
			return 0, fmt.Errorf("user %q: %v", f, err)
		}
		id = u.Uid
	}
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q has id %q, not a number", f, id)
	}
	return uint32(n), nil
}
