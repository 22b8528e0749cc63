#!/usr/bin/env bash
# Writes the certificates Redis's Tcl suite runs `--tls` with into DIR
# (the suite's tests/tls/), as Redis's utils/gen-test-certs.sh names them,
# but all X.509 v3, which rustls requires (Redis's script makes redis.crt
# a v1 certificate, which webpki refuses):
#   ca.{crt,key}       a self-signed CA
#   server.{crt,key}   for servers only (extendedKeyUsage serverAuth)
#   client.{crt,key}   for clients only (extendedKeyUsage clientAuth)
#   redis.{crt,key}    either use (no extendedKeyUsage)
#   redis.dh           DH parameters (unused by rustls; the suite passes it)
# Uses the distribution's openssl. Usage: bash ci/gen-test-certs.sh DIR
set -euo pipefail
dir=${1:?usage: gen-test-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
cat > v3.cnf <<'EOF'
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, IP:::1, DNS:localhost
[client]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
[redis]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
subjectAltName = IP:127.0.0.1, IP:::1, DNS:localhost
EOF
openssl genrsa -out ca.key 2048 2>/dev/null
openssl req -x509 -new -nodes -sha256 -key ca.key -days 3650 \
    -subj '/O=Redis Test/CN=Certificate Authority' \
    -config v3.cnf -extensions ca -out ca.crt 2>/dev/null
for pair in "server:Server-only" "client:Client-only" "redis:Generic-cert"; do
    name=${pair%%:*} cn=${pair#*:}
    openssl genrsa -out "$name.key" 2048 2>/dev/null
    openssl req -new -sha256 -subj "/O=Redis Test/CN=$cn" -key "$name.key" |
        openssl x509 -req -sha256 -CA ca.crt -CAkey ca.key -CAserial ca.txt -CAcreateserial \
            -days 365 -extfile v3.cnf -extensions "$name" -out "$name.crt" 2>/dev/null
done
# The suite passes tls-dh-params-file; rustls has no DHE, so any valid file
# will do: a small one, quick to make.
[ -f redis.dh ] || openssl dhparam -out redis.dh 512 2>/dev/null
chmod 644 ./*.key
echo "certificates (X.509 v3) in $dir"
