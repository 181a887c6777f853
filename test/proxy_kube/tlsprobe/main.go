// tlsprobe: one TLS handshake with Go's crypto/tls at its defaults (what
// kubectl, client-go and kube-apiserver use), then prints what was agreed
// as one JSON line. The post-quantum test of the node proxy reads it: the
// Go side's own view of the key exchange, not the proxy's.
//
//	tlsprobe -addr 127.0.0.1:8443 -name kubernetes.default.svc -ca ca.crt
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	addr := flag.String("addr", "", "host:port to connect to")
	name := flag.String("name", "", "server name to send and verify")
	caFile := flag.String("ca", "", "PEM CA bundle to verify the server with")
	flag.Parse()
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		fail(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fail(fmt.Errorf("%s: no certificate", *caFile))
	}
	// No CurvePreferences: Go's default, which offers X25519MLKEM768 first.
	conf := &tls.Config{ServerName: *name, RootCAs: roots}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", *addr, conf)
	if err != nil {
		fail(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	st := c.ConnectionState()
	out, _ := json.Marshal(map[string]string{
		"version": tls.VersionName(st.Version),
		"curve":   st.CurveID.String(),
	})
	fmt.Println(string(out))
	_ = c.Close()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "tlsprobe:", err)
	os.Exit(1)
}
