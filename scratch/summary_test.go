package scratch

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestLoadSummary: the summary of a record near the size limit is read from
// its first few KiB, and says what the whole record says; a record without
// one (written before summaries were), or with a damaged one, is read whole
// and summarised; no record is nil.
func TestLoadSummary(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	r := sampleRecord("big1")
	r.Config = json.RawMessage(`{"cniVersion":"1.0.0"}`)
	r.Attachments[1].Request = "ns/a@net1"
	// ~12 MiB of configs, as a pod with many large NADs has.
	r.Attachments[0].Config = json.RawMessage(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge","pad":"` + strings.Repeat("x", 12<<20) + `"}]}`)
	if err := s.Save(r); err != nil {
		t.Fatal(err)
	}
	want := Summarize(r)
	got, err := s.LoadSummary("big1")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("LoadSummary = %+v, %v; want %+v", got, err, want)
	}
	f, err := os.Open(s.Path("big1"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := &countingReader{r: f}
	if _, ok := readSummary(c); !ok || c.n > 64<<10 {
		t.Errorf("reading the summary read %d bytes (ok %v), want at most 64 KiB of the record", c.n, ok)
	}

	b, err := os.ReadFile(s.Path("big1"))
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(map[string]json.RawMessage){
		"no summary": func(e map[string]json.RawMessage) { delete(e, "summary"); delete(e, "summarySha256") },
		"edited summary": func(e map[string]json.RawMessage) {
			e["summary"] = bytes.Replace(e["summary"], []byte("net1"), []byte("net7"), 1)
		},
		"another's, checksum and all": func(e map[string]json.RawMessage) {
			e["summary"] = bytes.Replace(e["summary"], []byte("big1"), []byte("big2"), 1)
			sum := sha256.Sum256(e["summary"])
			e["summarySha256"], _ = json.Marshal(hex.EncodeToString(sum[:]))
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := map[string]json.RawMessage{}
			for k, v := range env {
				e[k] = v
			}
			edit(e)
			// In the order Encode writes them.
			out := []byte(`{"version":1`)
			for _, k := range []string{"summary", "summarySha256", "sha256", "record"} {
				if v, ok := e[k]; ok {
					out = append(out, `,"`+k+`":`...)
					out = append(out, v...)
				}
			}
			out = append(out, '}')
			s2 := &Store{Dir: t.TempDir()}
			if err := os.WriteFile(s2.Path("big1"), out, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := s2.LoadSummary("big1")
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("LoadSummary = %+v, %v; want the whole record's %+v", got, err, want)
			}
		})
	}
	if got, err := s.LoadSummary("none"); got != nil || err != nil {
		t.Errorf("LoadSummary of no record = %+v, %v; want nil, nil", got, err)
	}
}
