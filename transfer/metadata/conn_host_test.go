package metadata

import "testing"

func TestConnHost(t *testing.T) {
	for s, want := range map[string]string{
		"P2PHANDSHAKE":                    "",
		"http://10.0.0.1:8080/metadata":   "10.0.0.1",
		"https://meta.example:443/m":      "meta.example",
		"etcd://10.0.0.2:2379,10.0.0.3:1": "10.0.0.2",
		"etcd://http://10.0.0.4:2379":     "10.0.0.4",
		"10.0.0.5:2379":                   "10.0.0.5",
		"http://[fd00::1]:8080/metadata":  "fd00::1",
		"redis://10.0.0.6:6379":           "10.0.0.6",
		"redis://[fd00::2]":               "fd00::2",
	} {
		c, err := ParseConn(s)
		if err != nil {
			t.Fatalf("ParseConn(%q): %v", s, err)
		}
		if got := c.Host(); got != want {
			t.Errorf("ParseConn(%q).Host() = %q, want %q", s, got, want)
		}
	}
}
