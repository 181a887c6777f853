# Test PKI for the benchmark and conformance rigs (sourced by
# hack/bench/rig.sh's `pki`, inside the rig's work folder, for
# hack/bench-proxy.sh, bench-proxy-pooled.sh, load-proxy.sh and
# tlsfuzzer.sh): a cluster CA and leaves signed by it, 2 days, serverAuth.

# ca CN: ca.key and ca.crt, RSA-2048 like a kubeadm cluster CA.
ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=$1" 2>/dev/null
}

# leaf NAME KEYTYPE KEYOPTS SANS [EKU]: NAME.key, NAME.crt and NAME.pem
# (both); EKU defaults to serverAuth (clientAuth for a client certificate).
leaf() {
  openssl req -new -newkey "$2" -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" $3 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$4" "${5:-serverAuth}" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out "$1.crt" -extfile "$1.ext" 2>/dev/null
  cat "$1.crt" "$1.key" > "$1.pem"
}
