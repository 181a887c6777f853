// Command userpod is the workload of the konnectivity node test
// (test/ingress/node/konnectivity.rs): what a user reaches with `kubectl
// logs`, `kubectl exec` and `kubectl port-forward` through the tenant's API
// server, its konnectivity server and agent, and the kubelet; and a pod's
// long watch on the tenant's API through the node proxy. The image has no
// shell, so every command the test runs is this binary:
//
//	userpod serve PORT SECONDS TEXT   prints "started", echoes back every
//	                                  connection to PORT, prints TEXT
//	                                  after SECONDS, then serves on
//	userpod sleep SECONDS TEXT        prints TEXT after SECONDS (an exec)
//	userpod watch NAMESPACE NAME      one watch on the ConfigMaps of
//	                                  NAMESPACE named NAME, as an in-cluster
//	                                  client (see below)
//
// The watch is what a controller in a pod holds: it lists first for a fresh
// resourceVersion (retrying until the list answers), then opens ONE watch
// from it at KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT with the
// ServiceAccount's token, trusting only its ca.crt, over HTTP/2 when the
// server offers it (as client-go does, but without its pings: the
// connection is silent while nothing changes). It prints
//
//	watch open <protocol> resourceVersion=<rv>
//	event <TYPE> <object name>
//	watch ended: <why>                and exits 1: it never reconnects
//
// so a watch cut on the way (an idle timeout of a proxy) shows as an ended
// line, never as a quiet second watch.
//
// hack/node/build.sh builds it static and packs it as an image.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

const account = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	switch {
	case len(os.Args) == 5 && os.Args[1] == "serve":
		serve(os.Args[2], seconds(os.Args[3]), os.Args[4])
	case len(os.Args) == 4 && os.Args[1] == "sleep":
		time.Sleep(seconds(os.Args[2]))
		fmt.Println(os.Args[3])
	case len(os.Args) == 4 && os.Args[1] == "watch":
		watch(os.Args[2], os.Args[3])
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: userpod serve PORT SECONDS TEXT | userpod sleep SECONDS TEXT | userpod watch NAMESPACE NAME")
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

// inCluster is the pod's client of its cluster's API, from the ServiceAccount
// files and the `kubernetes` Service's environment.
type inCluster struct {
	base   string
	token  string
	client *http.Client
}

func newInCluster() (*inCluster, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set")
	}
	ca, err := os.ReadFile(account + "/ca.crt")
	if err != nil {
		return nil, err
	}
	token, err := os.ReadFile(account + "/token")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("no certificate in ca.crt")
	}
	return &inCluster{
		base:  "https://" + net.JoinHostPort(host, port),
		token: strings.TrimSpace(string(token)),
		client: &http.Client{Transport: &http.Transport{
			// A custom TLS config turns HTTP/2 off unless asked for.
			ForceAttemptHTTP2: true,
			TLSClientConfig:   &tls.Config{RootCAs: pool},
		}},
	}, nil
}

func (c *inCluster) get(path string, query url.Values) (*http.Response, error) {
	req, err := http.NewRequest("GET", c.base+path+"?"+query.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)
	}
	return resp, nil
}

// list returns the resourceVersion of the ConfigMap list the watch starts
// from: the watch then reports only what changes after it.
func (c *inCluster) list(path string, query url.Values) (string, error) {
	resp, err := c.get(path, query)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return "", err
	}
	if list.Metadata.ResourceVersion == "" {
		return "", errors.New("the list has no resourceVersion")
	}
	return list.Metadata.ResourceVersion, nil
}

func watch(namespace, name string) {
	c, err := newInCluster()
	if err != nil {
		fmt.Printf("watch ended: %v\n", err)
		os.Exit(1)
	}
	path := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/configmaps"
	query := url.Values{"fieldSelector": {"metadata.name=" + name}}
	var rv string
	for {
		if rv, err = c.list(path, query); err == nil {
			break
		}
		// Before the watch opens a failure is not the point: the token,
		// the RoleBinding or the proxy may still be on their way.
		fmt.Printf("list failed: %v\n", err)
		time.Sleep(time.Second)
	}
	query.Set("watch", "true")
	query.Set("resourceVersion", rv)
	resp, err := c.get(path, query)
	if err != nil {
		fmt.Printf("watch ended: opening it: %v\n", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	fmt.Printf("watch open %s resourceVersion=%s\n", resp.Proto, rv)
	decoder := json.NewDecoder(resp.Body)
	for {
		var event struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
				Message string `json:"message"`
			} `json:"object"`
		}
		if err := decoder.Decode(&event); err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the server closed the stream")
			}
			fmt.Printf("watch ended: %v\n", err)
			os.Exit(1)
		}
		what := event.Object.Metadata.Name
		if event.Type == "ERROR" {
			what = strconv.Quote(event.Object.Message)
		}
		fmt.Printf("event %s %s\n", event.Type, what)
	}
}
