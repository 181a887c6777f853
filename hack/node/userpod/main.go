// Command userpod is the workload of the konnectivity node test
// (test/ingress/node/konnectivity.rs): what a user reaches with `kubectl
// logs`, `kubectl exec` and `kubectl port-forward` through the tenant's API
// server, its konnectivity server and agent, and the kubelet. The image has
// no shell, so every command the test runs is this binary:
//
//	userpod serve PORT SECONDS TEXT   prints "started", echoes back every
//	                                  connection to PORT, prints TEXT
//	                                  after SECONDS, then serves on
//	userpod sleep SECONDS TEXT        prints TEXT after SECONDS (an exec)
//
// hack/node/build.sh builds it static and packs it as an image.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) != 5 && !(len(os.Args) == 4 && os.Args[1] == "sleep") {
		usage()
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2], seconds(os.Args[3]), os.Args[4])
	case "sleep":
		time.Sleep(seconds(os.Args[2]))
		fmt.Println(os.Args[3])
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: userpod serve PORT SECONDS TEXT | userpod sleep SECONDS TEXT")
	os.Exit(2)
}

func seconds(s string) time.Duration {
	n, err := strconv.Atoi(s)
	if err != nil {
		usage()
	}
	return time.Duration(n) * time.Second
}

func serve(port string, after time.Duration, text string) {
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("started")
	go func() {
		time.Sleep(after)
		fmt.Println(text)
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}
