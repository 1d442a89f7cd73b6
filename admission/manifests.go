package admission

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	kyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Finding is a Problem in a manifest file: the file ("-" for standard
// input) and the document in it, counted from 1.
type Finding struct {
	File     string `json:"file"`
	Document int    `json:"document"`
	Problem
}

func (f Finding) String() string {
	return fmt.Sprintf("%s: document %d: %s", f.File, f.Document, f.Problem)
}

// maxManifestBytes bounds one file; manifests are far smaller.
const maxManifestBytes = 64 << 20

// manifestExts are the files CheckPaths reads in a directory.
var manifestExts = map[string]bool{".yaml": true, ".yml": true, ".json": true}

// CheckPaths checks every object in the manifests at paths: files, the
// .yaml, .yml and .json files under directories, and "-" for stdin. A file
// that cannot be read or a document that is not YAML or JSON is a finding
// too, so that nothing is skipped quietly.
func CheckPaths(paths []string, stdin io.Reader, namespace string, o Options) ([]Finding, error) {
	var out []Finding
	for _, p := range paths {
		if p == "-" {
			out = append(out, checkStream("-", stdin, namespace, o)...)
			continue
		}
		files, err := manifestFiles(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			fh, err := os.Open(f)
			if err != nil {
				return nil, err
			}
			out = append(out, checkStream(f, fh, namespace, o)...)
			fh.Close()
		}
	}
	return out, nil
}

// manifestFiles is p itself, or the manifests under the directory p, sorted.
func manifestFiles(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && manifestExts[strings.ToLower(filepath.Ext(path))] {
			files = append(files, path)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// checkStream checks each document of one file.
func checkStream(name string, r io.Reader, namespace string, o Options) []Finding {
	data, err := io.ReadAll(io.LimitReader(r, maxManifestBytes+1))
	if err == nil && len(data) > maxManifestBytes {
		err = fmt.Errorf("larger than %d bytes", maxManifestBytes)
	}
	if err != nil {
		return []Finding{{File: name, Problem: Problem{Rule: "cannot read: " + err.Error()}}}
	}
	docs, err := documents(data)
	var out []Finding
	for i, doc := range docs {
		if len(doc) == 0 {
			continue
		}
		ps, err := CheckObject(doc, namespace, o)
		if err != nil {
			out = append(out, Finding{File: name, Document: i + 1, Problem: Problem{Rule: err.Error()}})
		}
		for _, p := range ps {
			out = append(out, Finding{File: name, Document: i + 1, Problem: p})
		}
	}
	if err != nil {
		out = append(out, Finding{File: name, Document: len(docs) + 1, Problem: Problem{Rule: err.Error()}})
	}
	return out
}

// documents splits a file into its documents, each as JSON (nil for an
// empty one): a stream of JSON values, or YAML documents separated by
// "---". It returns the documents read before an error.
func documents(data []byte) ([][]byte, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		var docs [][]byte
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		for {
			var raw json.RawMessage
			if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
				return docs, nil
			} else if err != nil {
				return docs, fmt.Errorf("not JSON: %v", err)
			}
			docs = append(docs, raw)
		}
	}
	var docs [][]byte
	rd := kyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, fmt.Errorf("not YAML: %v", err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return docs, fmt.Errorf("not YAML: %v", err)
		}
		if bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
			j = nil
		}
		docs = append(docs, j)
	}
}
