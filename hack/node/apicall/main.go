// Command apicall is the in-cluster client of the node tests
// (test/ingress/node.rs): it calls its cluster's API as a pod's client
// library does, at KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT (the
// `kubernetes` Service's ClusterIP), trusting only the ServiceAccount's
// ca.crt and presenting its token, on a new connection each time, and
// prints one line per call:
//
//	ok <unix ms> <server name> <sha256 of the certificate it was shown, 16 hex> <HTTP status>
//	fail <unix ms> <server name> <error>
//
// Calls alternate between verifying the certificate for the ClusterIP and
// for kubernetes.default.svc, the two names in-cluster clients use.
// hack/node/build.sh builds it static and packs it as an image.
package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

const account = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	every := 200 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("APICALL_EVERY")); err == nil {
		every = d
	}
	for {
		for _, name := range []string{host, "kubernetes.default.svc"} {
			call(host, port, name)
			time.Sleep(every)
		}
	}
}

func call(host, port, name string) {
	now := time.Now().UnixMilli()
	fail := func(err error) { fmt.Printf("fail %d %s %v\n", now, name, err) }
	ca, err := os.ReadFile(account + "/ca.crt")
	if err != nil {
		fail(err)
		return
	}
	token, err := os.ReadFile(account + "/token")
	if err != nil {
		fail(err)
		return
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	var seen string
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{
				RootCAs:    pool,
				ServerName: name,
				VerifyConnection: func(s tls.ConnectionState) error {
					sum := sha256.Sum256(s.PeerCertificates[0].Raw)
					seen = hex.EncodeToString(sum[:8])
					return nil
				},
			},
		},
	}
	req, _ := http.NewRequest("GET", "https://"+net.JoinHostPort(host, port)+"/version", nil)
	req.Header.Set("Authorization", "Bearer "+string(token))
	resp, err := client.Do(req)
	if err != nil {
		fail(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fail(fmt.Errorf("HTTP %d", resp.StatusCode))
		return
	}
	fmt.Printf("ok %d %s %s %d\n", now, name, seen, resp.StatusCode)
}
