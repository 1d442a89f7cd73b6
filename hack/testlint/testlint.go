// Package testlint is a go/analysis pass over the repository's tests for
// three patterns that let a test pass on a broken product, each found more
// than once in review (issue 52):
//
//   - sleep: a time.Sleep followed, in the same block, by a check (a
//     testing failure, or a returned error). After a fixed sleep, a check
//     that something did not happen passes whether or not it would have
//     happened a moment later, and a check that it did is a wall-clock
//     race. Wait for evidence instead (a counter, a log line, a write the
//     product makes when it is done). A sleep directly in a for loop's body
//     is a poll's pause, and is not reported.
//   - deadline: a poll loop whose deadline branch (an if on time.Now,
//     time.Since, time.Until or a context's Err, or a select case on
//     ctx.Done or a timer) leaves the loop, by return or break, without
//     failing: no testing failure, no panic, and no non-nil error or false
//     returned to a caller that must look at it. The caller then goes on as
//     if the wait had seen what it waited for.
//   - skip: a t.Skip, Skipf or SkipNow that gives no reason, or whose
//     function does not consult MANIFOLD_REQUIRE_PRIVILEGED before it, so
//     that CI (which sets it) cannot turn the skip into a failure
//     (internal/testenv.RequirePrivileged, DESIGN §9).
//
// A deliberate exception is marked with a comment on the line of the
// reported statement, or on the line above it, that names the check and
// says why: "//testlint:sleep <why>", "//testlint:deadline <why>",
// "//testlint:skip <why>". A marker without a reason is itself reported.
//
// The sleep and deadline checks look at test files (_test.go) and at every
// file of the test harness packages (under e2e/ and internal/testenv); the
// skip check at every file.
package testlint

import (
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// Analyzer is the pass; cmd/testlint runs it as a vet tool.
var Analyzer = &analysis.Analyzer{
	Name: "testlint",
	Doc:  "reports sleeps before checks, poll loops that end quietly at their deadline, and skips that MANIFOLD_REQUIRE_PRIVILEGED cannot turn into failures",
	Run:  run,
}

// RequireEnv is the variable that turns a skip into a failure.
const RequireEnv = "MANIFOLD_REQUIRE_PRIVILEGED"

// harness tells the packages whose every file is test code, by import path.
func harness(path string) bool {
	for _, el := range strings.Split(path, "/") {
		if el == "e2e" || el == "testenv" {
			return true
		}
	}
	return false
}

func run(pass *analysis.Pass) (any, error) {
	for _, f := range pass.Files {
		name := pass.Fset.File(f.Pos()).Name()
		c := &checker{pass: pass, file: f, markers: markers(pass, f)}
		tests := strings.HasSuffix(name, "_test.go") || harness(pass.Pkg.Path())
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			c.skips(fd.Body)
			if tests {
				c.sleeps(fd.Body)
				c.deadlines(fd.Body)
			}
		}
		c.badMarkers()
	}
	return nil, nil
}

type checker struct {
	pass    *analysis.Pass
	file    *ast.File
	markers map[markerKey]*marker
}

type markerKey struct {
	check string
	line  int
}

type marker struct {
	pos    token.Pos
	reason string
}

// markers are the file's //testlint:<check> comments, by check and line.
func markers(pass *analysis.Pass, f *ast.File) map[markerKey]*marker {
	out := map[markerKey]*marker{}
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			text, ok := strings.CutPrefix(c.Text, "//testlint:")
			if !ok {
				continue
			}
			check, reason, _ := strings.Cut(text, " ")
			reason = strings.TrimSpace(reason)
			if strings.HasPrefix(reason, "//") {
				reason = "" // another comment on the line, not a reason
			}
			line := pass.Fset.Position(c.Pos()).Line
			out[markerKey{check, line}] = &marker{pos: c.Pos(), reason: reason}
		}
	}
	return out
}

// excused says whether a marker for check is on n's line or the line above.
func (c *checker) excused(check string, n ast.Node) bool {
	line := c.pass.Fset.Position(n.Pos()).Line
	for _, l := range []int{line, line - 1} {
		if m, ok := c.markers[markerKey{check, l}]; ok && m.reason != "" {
			return true
		}
	}
	return false
}

// badMarkers reports markers with no reason, or for no check.
func (c *checker) badMarkers() {
	for k, m := range c.markers {
		switch {
		case k.check != "sleep" && k.check != "deadline" && k.check != "skip":
			c.pass.Reportf(m.pos, "testlint marker names no check (sleep, deadline or skip): %q", k.check)
		case m.reason == "":
			c.pass.Reportf(m.pos, "testlint:%s marker gives no reason", k.check)
		}
	}
}

// testingMethod is the name of the method of package testing that call
// calls (t.Fatal, b.Skip, …), or "".
func (c *checker) testingMethod(call *ast.CallExpr) string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	fn, ok := c.pass.TypesInfo.Uses[sel.Sel].(*types.Func)
	if !ok || fn.Pkg() == nil || fn.Pkg().Path() != "testing" {
		return ""
	}
	return fn.Name()
}

// pkgFunc reports whether call calls the function pkg.name.
func (c *checker) pkgFunc(call *ast.CallExpr, pkg, name string) bool {
	var id *ast.Ident
	switch f := call.Fun.(type) {
	case *ast.SelectorExpr:
		id = f.Sel
	case *ast.Ident:
		id = f
	default:
		return false
	}
	fn, ok := c.pass.TypesInfo.Uses[id].(*types.Func)
	return ok && fn.Pkg() != nil && fn.Pkg().Path() == pkg && fn.Name() == name
}

var failing = map[string]bool{"Error": true, "Errorf": true, "Fatal": true, "Fatalf": true, "Fail": true, "FailNow": true}

// fails reports whether n, outside the function literals in it, fails the
// test (a testing failure, a panic) or returns something a caller must act
// on (a non-nil error, or false).
func (c *checker) fails(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if found {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.CallExpr:
			if failing[c.testingMethod(n)] {
				found = true
			}
			if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "panic" {
				if _, builtin := c.pass.TypesInfo.Uses[id].(*types.Builtin); builtin {
					found = true
				}
			}
		case *ast.ReturnStmt:
			for _, r := range n.Results {
				if c.reportsFailure(r) {
					found = true
				}
			}
		}
		return true
	})
	return found
}

// checks reports whether n, outside function literals and for loops (a
// poll after a sleep waits for its evidence), fails the test or returns an
// error it makes (fmt.Errorf, errors.New): the verdict of a check, not an
// error passed on.
func (c *checker) checks(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if found {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit, *ast.ForStmt:
			return false
		case *ast.CallExpr:
			if failing[c.testingMethod(n)] {
				found = true
			}
		case *ast.ReturnStmt:
			for _, r := range n.Results {
				if call, ok := r.(*ast.CallExpr); ok && (c.pkgFunc(call, "fmt", "Errorf") || c.pkgFunc(call, "errors", "New")) {
					found = true
				}
			}
		}
		return true
	})
	return found
}

var errorType = types.Universe.Lookup("error").Type()

// reportsFailure reports whether a returned value tells the caller the wait
// failed: an error that is not nil, or false.
func (c *checker) reportsFailure(e ast.Expr) bool {
	tv, ok := c.pass.TypesInfo.Types[e]
	if !ok {
		return false
	}
	if tv.IsNil() {
		return false
	}
	if tv.Value != nil && tv.Value.Kind() == constant.Bool {
		return !constant.BoolVal(tv.Value)
	}
	return types.Implements(tv.Type, errorType.Underlying().(*types.Interface))
}

// sleeps reports a time.Sleep followed by a check in the same block. A
// sleep directly in a for loop's body is a poll's pause.
func (c *checker) sleeps(body *ast.BlockStmt) {
	var visit func(list []ast.Stmt, inFor bool)
	walk := func(n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BlockStmt:
				visit(n.List, false)
				return false
			case *ast.CaseClause:
				visit(n.Body, false)
				return false
			case *ast.CommClause:
				visit(n.Body, false)
				return false
			case *ast.ForStmt:
				visit(n.Body.List, true)
				return false
			}
			return true
		})
	}
	visit = func(list []ast.Stmt, inFor bool) {
		for i, s := range list {
			if es, ok := s.(*ast.ExprStmt); ok && !inFor {
				if call, ok := es.X.(*ast.CallExpr); ok && c.pkgFunc(call, "time", "Sleep") {
					for _, after := range list[i+1:] {
						if c.checks(after) {
							if !c.excused("sleep", s) {
								c.pass.Reportf(s.Pos(), "time.Sleep followed by a check: after a fixed sleep, a check that something did not happen passes whatever comes later, and one that it did is a race; wait for evidence (or mark it //testlint:sleep <why>)")
							}
							break
						}
					}
				}
			}
			walk(s)
		}
	}
	visit(body.List, false)
}

// deadlines reports a poll loop's deadline branch that leaves the loop
// without failing. A branch that breaks out is fine when what follows the
// loop in its block fails (the check after the loop sees the last try).
func (c *checker) deadlines(body *ast.BlockStmt) {
	var visit func(list []ast.Stmt)
	visit = func(list []ast.Stmt) {
		for i, s := range list {
			st := s
			for {
				l, ok := st.(*ast.LabeledStmt)
				if !ok {
					break
				}
				st = l.Stmt
			}
			if loop, ok := st.(*ast.ForStmt); ok {
				c.loop(loop, list[i+1:])
			}
			ast.Inspect(s, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BlockStmt:
					visit(n.List)
					return false
				case *ast.CaseClause:
					visit(n.Body)
					return false
				case *ast.CommClause:
					visit(n.Body)
					return false
				}
				return true
			})
		}
	}
	visit(body.List)
}

// loop checks the deadline branches of one for loop, after which come the
// statements after.
func (c *checker) loop(loop *ast.ForStmt, after []ast.Stmt) {
	checkedAfter := c.failsList(after)
	report := func(n ast.Node, body []ast.Stmt) {
		returns, breaks := c.leavesList(body)
		if !returns && !breaks || c.failsList(body) || (!returns && checkedAfter) || c.excused("deadline", n) {
			return
		}
		c.pass.Reportf(n.Pos(), "poll loop leaves at its deadline without failing: fail the test, or return an error (or false) the caller checks (or mark it //testlint:deadline <why>)")
	}
	ast.Inspect(loop.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit, *ast.ForStmt:
			return false // an inner loop is checked on its own
		case *ast.IfStmt:
			if c.isDeadline(n.Cond) {
				report(n, n.Body.List)
			}
		case *ast.CommClause:
			if n.Comm != nil && c.isTimerRecv(n.Comm) {
				report(n, n.Body)
			}
		}
		return true
	})
}

// isDeadline reports whether cond reads the clock or a context's error.
func (c *checker) isDeadline(cond ast.Expr) bool {
	found := false
	ast.Inspect(cond, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || found {
			return !found
		}
		if c.pkgFunc(call, "time", "Now") || c.pkgFunc(call, "time", "Since") || c.pkgFunc(call, "time", "Until") || c.isCtxMethod(call, "Err") {
			found = true
		}
		return true
	})
	return found
}

// isTimerRecv reports whether a select case receives from a context's Done,
// time.After, or a timer's channel.
func (c *checker) isTimerRecv(comm ast.Stmt) bool {
	var x ast.Expr
	switch s := comm.(type) {
	case *ast.ExprStmt:
		x = s.X
	case *ast.AssignStmt:
		if len(s.Rhs) == 1 {
			x = s.Rhs[0]
		}
	}
	u, ok := x.(*ast.UnaryExpr)
	if !ok || u.Op != token.ARROW {
		return false
	}
	switch ch := u.X.(type) {
	case *ast.CallExpr:
		return c.isCtxMethod(ch, "Done") || c.pkgFunc(ch, "time", "After")
	case *ast.SelectorExpr:
		if ch.Sel.Name != "C" {
			return false
		}
		t := c.pass.TypesInfo.TypeOf(ch.X)
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		n, ok := t.(*types.Named)
		return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "time" && (n.Obj().Name() == "Timer" || n.Obj().Name() == "Ticker")
	}
	return false
}

// isCtxMethod reports whether call calls method name of a context.Context.
func (c *checker) isCtxMethod(call *ast.CallExpr, name string) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	t := c.pass.TypesInfo.TypeOf(sel.X)
	if t == nil {
		return false
	}
	ctx := contextType(c.pass.Pkg)
	return ctx != nil && types.Implements(t, ctx)
}

// contextType is context.Context's interface, when the package imports
// context (directly or not).
func contextType(pkg *types.Package) *types.Interface {
	var find func(p *types.Package, seen map[*types.Package]bool) *types.Interface
	find = func(p *types.Package, seen map[*types.Package]bool) *types.Interface {
		if seen[p] {
			return nil
		}
		seen[p] = true
		if p.Path() == "context" {
			if obj := p.Scope().Lookup("Context"); obj != nil {
				if i, ok := obj.Type().Underlying().(*types.Interface); ok {
					return i
				}
			}
			return nil
		}
		for _, imp := range p.Imports() {
			if i := find(imp, seen); i != nil {
				return i
			}
		}
		return nil
	}
	return find(pkg, map[*types.Package]bool{})
}

// leavesList reports whether the statements return, or break out of the
// loop they are in (outside function literals, and inner loops, switches
// and selects, whose break is their own).
func (c *checker) leavesList(list []ast.Stmt) (returns, breaks bool) {
	for _, s := range list {
		ast.Inspect(s, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit:
				return false
			case *ast.ReturnStmt:
				returns = true
			case *ast.BranchStmt:
				if n.Tok == token.BREAK || n.Tok == token.GOTO {
					breaks = true
				}
			case *ast.ForStmt, *ast.RangeStmt, *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
				ast.Inspect(n, func(m ast.Node) bool {
					if _, ok := m.(*ast.FuncLit); ok {
						return false
					}
					if _, ok := m.(*ast.ReturnStmt); ok {
						returns = true
					}
					return true
				})
				return false
			}
			return true
		})
	}
	return returns, breaks
}

func (c *checker) failsList(list []ast.Stmt) bool {
	for _, s := range list {
		if c.fails(s) {
			return true
		}
	}
	return false
}

var skips = map[string]bool{"Skip": true, "Skipf": true, "SkipNow": true}

// skips reports a skip with no reason, or one that RequireEnv is not
// consulted for before it in its function.
func (c *checker) skips(body *ast.BlockStmt) {
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || !skips[c.testingMethod(call)] {
			return true
		}
		if c.excused("skip", call) {
			return true
		}
		if !c.hasReason(call) {
			c.pass.Reportf(call.Pos(), "skip gives no reason: say what is missing (or mark it //testlint:skip <why>)")
			return true
		}
		if !c.consultsEnvBefore(body, call.Pos()) {
			c.pass.Reportf(call.Pos(), "skip that %s=1 cannot turn into a failure: check it first, as testenv.RequirePrivileged does (or mark it //testlint:skip <why>)", RequireEnv)
		}
		return true
	})
}

// hasReason reports whether a skip's arguments can say something: not none,
// and not one empty string.
func (c *checker) hasReason(call *ast.CallExpr) bool {
	if len(call.Args) == 0 {
		return false
	}
	if len(call.Args) == 1 {
		if tv, ok := c.pass.TypesInfo.Types[call.Args[0]]; ok && tv.Value != nil && tv.Value.Kind() == constant.String {
			return strings.TrimSpace(constant.StringVal(tv.Value)) != ""
		}
	}
	return true
}

// consultsEnvBefore reports whether body names RequireEnv (a string
// constant of that value) before pos.
func (c *checker) consultsEnvBefore(body *ast.BlockStmt, pos token.Pos) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if found || n == nil || n.Pos() >= pos {
			return !found && n != nil && n.Pos() < pos
		}
		e, ok := n.(ast.Expr)
		if !ok {
			return true
		}
		if tv, ok := c.pass.TypesInfo.Types[e]; ok && tv.Value != nil && tv.Value.Kind() == constant.String && constant.StringVal(tv.Value) == RequireEnv {
			found = true
			return false
		}
		return true
	})
	return found
}
