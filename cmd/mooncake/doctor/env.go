package doctor

import (
	"fmt"
	"sort"
	"strings"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
	"github.com/mooncake-go/mooncake/internal/envvars"
)

// environ is an environment as a map, the way the checks read it.
type environ map[string]string

func parseEnviron(kv []string) environ {
	e := environ{}
	for _, s := range kv {
		if k, v, found := strings.Cut(s, "="); found {
			e[k] = v
		}
	}
	return e
}

// value returns v's value in e when it is set and valid, else def.
func (e environ) value(v *envvars.Var, def string) string {
	s := strings.TrimSpace(e[v.Name])
	if s == "" || v.Validate(s) != nil {
		return def
	}
	return s
}

// checkEnv checks every MC_*/MOONCAKE_* variable set: unknown names
// (with a guess at the intended one), upstream variables that have no
// effect here, and values the runtime would ignore.
func checkEnv(e environ) []Result {
	var names []string
	for k := range e {
		if strings.HasPrefix(k, "MC_") || strings.HasPrefix(k, "MOONCAKE_") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var out []Result
	var good []string
	for _, name := range names {
		value := strings.TrimSpace(e[name])
		v := envvars.Find(name)
		switch {
		case v == nil:
			msg := name + " is not a variable Mooncake-Go or upstream Mooncake reads"
			fix := "unset it"
			if c := envvars.Closest(name); c != nil {
				msg += fmt.Sprintf("; did you mean %s (%s)?", c.Name, c.Doc)
				fix = fmt.Sprintf("rename it to %s", c.Name)
			}
			out = append(out, finding("env", Warning, msg, fix))
		case v.Upstream():
			out = append(out, finding("env", Warning,
				fmt.Sprintf("%s is upstream Mooncake's (%s); Mooncake-Go does not read it, so it has no effect", name, strings.TrimPrefix(v.Doc, "upstream: ")),
				"unset it, or see docs/doctor.md for what Mooncake-Go offers instead"))
		case value == "":
			good = append(good, name+" (empty: default)")
		case v.Secret && v.Validate(value) == nil:
			good = append(good, name+" (set; a secret, not shown)")
		default:
			if err := v.Validate(value); err != nil {
				fix := "set it to a valid value or unset it"
				if r := v.Range(); r != "" {
					fix = fmt.Sprintf("set it to %s (%s) or unset it", r, v.Doc)
				} else if len(v.Values) > 0 {
					fix = fmt.Sprintf("set it to one of %s (%s) or unset it", strings.Join(v.Values, ", "), v.Doc)
				}
				r := problem("env", Failure, troubleshoot.InvalidEnv, v.Complaint(value, err))
				r.Fix = fix
				out = append(out, r)
				continue
			}
			good = append(good, name+"="+value)
		}
	}
	if len(good) > 0 || len(out) == 0 {
		msg := "no MC_*/MOONCAKE_* variables set"
		if len(good) > 0 {
			msg = "valid: " + strings.Join(good, ", ")
		}
		out = append([]Result{ok("env", msg)}, out...)
	}
	return out
}
