# Certificates of the local cluster, made with openssl (sourced by up.sh).
# shellcheck shell=bash

# cert NAME CN [O] [EXT]: an EC key and a certificate signed by the cluster CA.
cert() {
  local name=$1 cn=$2 org=${3:-} ext=${4:-}
  [ -f "$pki/$name.crt" ] && return 0
  local subj="/CN=$cn"
  [ -n "$org" ] && subj="/O=$org$subj"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$pki/$name.key" -out "$pki/$name.csr" -subj "$subj" 2>/dev/null
  printf '%s\n' "${ext:-extendedKeyUsage=clientAuth}" "keyUsage=critical,digitalSignature" \
    >"$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 365 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
  chmod 600 "$pki/$name.key"
}

make_pki() {
  local ip=$1
  mkdir -p "$pki" && chmod 700 "$pki"
  if [ ! -f "$pki/ca.crt" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 3650 -subj "/CN=taskfleet-local-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      2>/dev/null
  fi
  local sans="IP:127.0.0.1,IP:$apiserver_service_ip,IP:$ip,DNS:localhost,DNS:kubernetes"
  sans+=",DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  # A changed node address invalidates the serving certificates.
  if [ -f "$pki/apiserver.crt" ] &&
     ! grep -q "IP Address:$ip\b" <<<"$(openssl x509 -in "$pki/apiserver.crt" -noout -text)"; then
    rm -f "$pki/apiserver.crt" "$pki/kubelet-serving.crt"
  fi
  cert apiserver kube-apiserver "" "subjectAltName=$sans
extendedKeyUsage=serverAuth"
  cert kubelet-serving "$node_name" "" "subjectAltName=IP:$ip,IP:127.0.0.1,DNS:$node_name
extendedKeyUsage=serverAuth"
  cert admin kubernetes-admin system:masters
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert controller-manager system:kube-controller-manager
  cert scheduler system:kube-scheduler
  cert kubelet "system:node:$node_name" system:nodes
  cert kube-proxy system:kube-proxy
  if [ ! -f "$pki/sa.key" ]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "$pki/sa.key"
    openssl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
    chmod 600 "$pki/sa.key"
  fi
}

# kubeconfig FILE CERTNAME SERVER: a kubeconfig with an embedded client certificate.
kubeconfig() {
  local file=$1 name=$2 server=$3
  KUBECONFIG=$file kubectl config set-cluster "$context" --server="$server" \
    --certificate-authority="$pki/ca.crt" --embed-certs=true >/dev/null
  KUBECONFIG=$file kubectl config set-credentials "$name" --client-certificate="$pki/$name.crt" \
    --client-key="$pki/$name.key" --embed-certs=true >/dev/null
  KUBECONFIG=$file kubectl config set-context "$context" --cluster="$context" --user="$name" >/dev/null
  KUBECONFIG=$file kubectl config use-context "$context" >/dev/null
  chmod 600 "$file"
}
