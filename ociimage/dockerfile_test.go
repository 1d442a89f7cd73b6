package ociimage_test

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/ociimage"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	op, args string
}

// parseDockerfile returns the instructions of each stage (a stage starts at
// FROM), comments and blank lines dropped.
func parseDockerfile(t *testing.T, text string) [][]instruction {
	t.Helper()
	var stages [][]instruction
	var line string
	for _, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		if line == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(trimmed, `\`); ok {
			line += cont + " "
			continue
		}
		line += trimmed
		op, args, _ := strings.Cut(line, " ")
		line = ""
		in := instruction{op: strings.ToUpper(op), args: strings.TrimSpace(args)}
		if in.op == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %s before the first FROM", in.op)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	return stages
}

// imagePaths are the paths of manifold's binaries in the image, sorted.
func imagePaths() []string {
	var out []string
	for _, b := range ociimage.Binaries {
		out = append(out, path.Join(ociimage.BinDir, b.Name))
	}
	slices.Sort(out)
	return out
}

// TestDockerfileMatchesImage: the Dockerfile's final stage holds what
// `make image` packs and nothing else: FROM scratch, the same files, the
// same entrypoint, and no instruction that ociimage would not repeat (ENV,
// USER, WORKDIR, …). Its build stage builds each binary with the flags of
// ociimage (the Makefile's).
func TestDockerfileMatchesImage(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "deployments", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(t, string(text))
	final := stages[len(stages)-1]
	if final[0].args != "scratch" {
		t.Errorf("final stage is FROM %s, want scratch: ociimage packs nothing but the binaries", final[0].args)
	}
	var files []string
	var entrypoint []string
	for _, in := range final[1:] {
		switch in.op {
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) < 3 || !strings.HasPrefix(f[0], "--from=") || !strings.HasSuffix(f[len(f)-1], "/") {
				t.Errorf("COPY %s: want COPY --from=<stage> <files> <dir>/", in.args)
				continue
			}
			for _, src := range f[1 : len(f)-1] {
				files = append(files, path.Join(f[len(f)-1], path.Base(src)))
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &entrypoint); err != nil {
				t.Errorf("ENTRYPOINT %s: want the exec (JSON) form: %v", in.args, err)
			}
		default:
			t.Errorf("final stage has %s %s, which ociimage does not repeat: add it to ociimage (manifold.go) and to this test", in.op, in.args)
		}
	}
	slices.Sort(files)
	if want := imagePaths(); !slices.Equal(files, want) {
		t.Errorf("the Dockerfile's image holds %q, ociimage's %q", files, want)
	}
	if !slices.Equal(entrypoint, ociimage.Entrypoint) {
		t.Errorf("the Dockerfile's entrypoint is %q, ociimage's %q", entrypoint, ociimage.Entrypoint)
	}

	// go build ... -ldflags "<flags>" -o /out/<name> <package>
	build := regexp.MustCompile(`go build (?:-\S+ )*-ldflags "([^"]*)" -o /out/(\S+) (\S+)`)
	built := map[string]bool{}
	for _, stage := range stages[:len(stages)-1] {
		for _, in := range stage {
			if in.op != "RUN" {
				continue
			}
			for _, m := range build.FindAllStringSubmatch(in.args, -1) {
				built[m[2]] = true
				checkBuild(t, "Dockerfile", m[2], m[3], m[1], "$VERSION")
			}
		}
	}
	for _, b := range ociimage.Binaries {
		if !built[b.Name] {
			t.Errorf("the Dockerfile does not build /out/%s", b.Name)
		}
	}
}

// TestMakefileMatchesImage: `make build` links each binary with the flags
// that ociimage uses, so that `make image` packs what `make build` makes.
func TestMakefileMatchesImage(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(\w+) :?= (.*)$`).FindAllStringSubmatch(string(text), -1) {
		vars[m[1]] = m[2]
	}
	expand := func(s string) string {
		return regexp.MustCompile(`\$\((\w+)\)`).ReplaceAllStringFunc(s, func(ref string) string {
			name := ref[2 : len(ref)-1]
			if name == "VERSION" {
				return ref
			}
			return vars[name]
		})
	}
	build := regexp.MustCompile(`(?m)^\tCGO_ENABLED=0 \$\(GO\) build -trimpath -ldflags '([^']*)' -o bin/(\S+) (\S+)$`)
	built := map[string]bool{}
	for _, m := range build.FindAllStringSubmatch(string(text), -1) {
		built[m[2]] = true
		checkBuild(t, "Makefile", m[2], m[3], expand(m[1]), "$(VERSION)")
	}
	for _, b := range ociimage.Binaries {
		if !built[b.Name] {
			t.Errorf("the Makefile's build does not make bin/%s with CGO_ENABLED=0 and -trimpath", b.Name)
		}
	}
}

// checkBuild checks one build of name from pkg with flags against ociimage's.
func checkBuild(t *testing.T, where, name, pkg, flags, version string) {
	t.Helper()
	i := slices.IndexFunc(ociimage.Binaries, func(b ociimage.Binary) bool { return b.Name == name })
	if i < 0 {
		t.Errorf("%s builds %s, which ociimage does not pack", where, name)
		return
	}
	b := ociimage.Binaries[i]
	if pkg != b.Package {
		t.Errorf("%s builds %s from %s, ociimage from %s", where, name, pkg, b.Package)
	}
	if want := ociimage.LDFlags(b, version); flags != want {
		t.Errorf("%s links %s with -ldflags %q, ociimage with %q", where, name, flags, want)
	}
}
