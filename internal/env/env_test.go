package env

import (
	"testing"
	"time"
)

func TestIntRule(t *testing.T) {
	for _, tc := range []struct {
		val  string
		want int
	}{{"", 7}, {"12", 12}, {" 3 ", 3}, {"0", 7}, {"-4", 7}, {"x", 7}, {"1.5", 7}} {
		t.Setenv("MC_TEST_ENV_INT", tc.val)
		if got := Int("MC_TEST_ENV_INT", 7); got != tc.want {
			t.Errorf("Int(%q) = %d, want %d", tc.val, got, tc.want)
		}
	}
}

func TestSecondsRule(t *testing.T) {
	for _, tc := range []struct {
		val  string
		want time.Duration
	}{{"", time.Minute}, {"2", 2 * time.Second}, {"0.5", 500 * time.Millisecond}, {"0", time.Minute}, {"-1", time.Minute}, {"soon", time.Minute}, {"1e300", time.Minute}} {
		t.Setenv("MC_TEST_ENV_SECONDS", tc.val)
		if got := Seconds("MC_TEST_ENV_SECONDS", time.Minute); got != tc.want {
			t.Errorf("Seconds(%q) = %v, want %v", tc.val, got, tc.want)
		}
	}
}

func TestBool(t *testing.T) {
	for val, want := range map[string]bool{"": false, "1": true, "TRUE": true, "on": true, "yes": true, "0": false, "false": false, "nope": false} {
		t.Setenv("MC_TEST_ENV_BOOL", val)
		if got := Bool("MC_TEST_ENV_BOOL"); got != want {
			t.Errorf("Bool(%q) = %v", val, got)
		}
	}
}
