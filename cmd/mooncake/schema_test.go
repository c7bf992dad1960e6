package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// documentedSchema reads the JSON Schema of `mooncake doctor --json` from
// docs/doctor.md (the ```json block after <!-- doctor-schema -->).
func documentedSchema(t *testing.T) map[string]any {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "doctor.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, found := strings.Cut(string(doc), "<!-- doctor-schema -->")
	_, rest, found2 := strings.Cut(rest, "```json\n")
	block, _, found3 := strings.Cut(rest, "```")
	if !found || !found2 || !found3 {
		t.Fatal("docs/doctor.md has no schema block after <!-- doctor-schema -->")
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(block), &schema); err != nil {
		t.Fatalf("docs/doctor.md schema: %v", err)
	}
	return schema
}

// validateAgainstDocumentedSchema checks out against the documented schema
// and that every warning and failure carries a fix.
func validateAgainstDocumentedSchema(t *testing.T, out []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if err := validate(documentedSchema(t), v, "$"); err != nil {
		t.Fatalf("output does not match docs/doctor.md's schema: %v\n%s", err, out)
	}
	for _, c := range v.(map[string]any)["checks"].([]any) {
		c := c.(map[string]any)
		if st := c["status"]; (st == "warning" || st == "failure") && c["fix"] == nil {
			t.Errorf("%v without a fix: %v", st, c)
		}
	}
}

// validate implements the JSON Schema keywords the documented schema uses:
// type, enum, required, properties, additionalProperties: false, items,
// minimum.
func validate(schema map[string]any, v any, path string) error {
	if enum, ok := schema["enum"].([]any); ok && !slices.Contains(enum, v) {
		return fmt.Errorf("%s: %v is not one of %v", path, v, enum)
	}
	switch schema["type"] {
	case nil:
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: not an object", path)
		}
		props, _ := schema["properties"].(map[string]any)
		for _, r := range schema["required"].([]any) {
			if _, ok := obj[r.(string)]; !ok {
				return fmt.Errorf("%s: %s missing", path, r)
			}
		}
		for k, val := range obj {
			sub, known := props[k].(map[string]any)
			if !known {
				if schema["additionalProperties"] == false {
					return fmt.Errorf("%s: property %q not in the schema", path, k)
				}
				continue
			}
			if err := validate(sub, val, path+"."+k); err != nil {
				return err
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: not an array", path)
		}
		for i, item := range arr {
			if err := validate(schema["items"].(map[string]any), item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: not a string", path)
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return fmt.Errorf("%s: not an integer", path)
		}
		if m, ok := schema["minimum"].(float64); ok && f < m {
			return fmt.Errorf("%s: %v below %v", path, f, m)
		}
	default:
		return fmt.Errorf("%s: schema type %v not understood by this validator", path, schema["type"])
	}
	return nil
}

// The validator rejects what the schema forbids (so the doctor tests'
// validation can fail).
func TestSchemaValidatorRejects(t *testing.T) {
	schema := documentedSchema(t)
	for _, bad := range []string{
		`{}`,
		`{"version":"1","checks":[],"summary":{"ok":0,"warning":0,"failure":0}}`,
		`{"version":"1","checks":[{"check":"x","status":"bad","message":""}],"summary":{"ok":0,"warning":0,"failure":0,"skipped":0}}`,
		`{"version":"1","checks":[{"check":"x","status":"ok","message":"","extra":1}],"summary":{"ok":0,"warning":0,"failure":0,"skipped":0}}`,
		`{"version":"1","checks":[],"summary":{"ok":-1,"warning":0,"failure":0,"skipped":0}}`,
	} {
		var v any
		json.Unmarshal([]byte(bad), &v)
		if validate(schema, v, "$") == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	var good any
	json.Unmarshal([]byte(`{"version":"1","checks":[{"check":"x","status":"ok","message":"m"}],"summary":{"ok":1,"warning":0,"failure":0,"skipped":0}}`), &good)
	if err := validate(schema, good, "$"); err != nil {
		t.Error(err)
	}
}
