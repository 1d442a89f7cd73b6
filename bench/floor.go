package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/manifold-cni/manifold/bench/floorcall"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// The floor arm: the direct reference's calls, made by a small process of
// their own (bench/floor, serving bench/floorcall's calls) that does nothing
// but run each pod's delegates through libcni with libcni's own exec, as a
// runtime that attached every network itself would. Its CPU time per ADD and
// DEL is what running these delegates costs a Go process at the least; the
// daemon's CPU beside it is the daemon's own cost on top of the delegates it
// runs (issue 38). The direct arm cannot give this figure: its calls run in
// the benchmark process, whose process-event watch handles every process the
// node starts.

// floorArm is the running floor process.
type floorArm struct {
	pid int
	in  *json.Encoder
	out *json.Decoder
}

// startFloor builds and starts the floor process, tied to this one, and
// ends it at the benchmark's end.
func (b *bench) startFloor() error {
	bin := filepath.Join(b.dir, "floor")
	if err := b.goBuild(bin, "./bench/floor"); err != nil {
		return err
	}
	cmd := exec.Command(bin, b.binDir, filepath.Join(b.dir, "floor-cache"))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	done, err := testenv.StartTied(cmd, nil)
	if err != nil {
		return fmt.Errorf("floor process: %w", err)
	}
	b.onCleanup(func() {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	b.floor = &floorArm{pid: cmd.Process.Pid, in: json.NewEncoder(stdin), out: json.NewDecoder(stdout)}
	return nil
}

// floorCall runs ADD or DEL of a sandbox's networks in the floor process,
// with the direct reference's configs.
func (b *bench) floorCall(verb string, sb *sandbox) (sample, error) {
	call := floorcall.Call{Verb: verb}
	for i := 0; i < sb.Pod.Networks; i++ {
		call.Lists = append(call.Lists, string(b.refLists[sb.Pod.Kind][i].Bytes))
		call.Confs = append(call.Confs, b.directConf(sb, i))
	}
	start := time.Now()
	if err := b.floor.in.Encode(call); err != nil {
		return sample{}, fmt.Errorf("floor process: %w", err)
	}
	var answer floorcall.Answer
	if err := b.floor.out.Decode(&answer); err != nil {
		return sample{}, fmt.Errorf("floor process: %w", err)
	}
	s := sample{Wall: time.Since(start)}
	if answer.Error != "" {
		return s, fmt.Errorf("floor %s of %s: %s", verb, sb.ContainerID, answer.Error)
	}
	return s, nil
}
