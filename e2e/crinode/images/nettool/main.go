// Command nettool is the test image's program, built by the runtime tier
// (e2e/crinode): it proves that an attachment carries packets.
//
//	nettool listen ADDR    accept TCP connections, answer each with "hello from HOSTNAME\n"
//	nettool connect ADDR   dial ADDR, print the answer, exit 0 (1 on any error)
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: nettool listen|connect ADDR")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "listen":
		err = listen(os.Args[2])
	case "connect":
		err = connect(os.Args[2])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nettool:", err)
		os.Exit(1)
	}
}

func listen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		fmt.Fprintf(c, "hello from %s\n", host)
		c.Close()
	}
}

func connect(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read from %s: %w", addr, err)
	}
	fmt.Print(line)
	return nil
}
