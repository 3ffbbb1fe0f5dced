#!/usr/bin/env bash
# Bring up the local single-node Kubernetes cluster (idempotent): etcd, kube-apiserver,
# controller-manager, scheduler, containerd + runc + CNI, kubelet, kube-proxy (iptables) and
# CoreDNS. Daemons run directly (no systemd); logs, pids, certs and kubeconfigs live in
# ${TASKFLEET_CACHE:-~/.cache/taskfleet}/cluster. Prints the `export KUBECONFIG=...` line.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=pki.sh
. "$here/pki.sh"
[ "$(id -u)" = 0 ] || die "up.sh runs as root (kubelet, containerd, iptables)"
hold_lock cluster

ensure_packages etcd-server containerd runc containernetworking-plugins iptables conntrack \
  socat ebtables ethtool iproute2 util-linux mount procps openssl ca-certificates curl
"$here/build-k8s.sh" kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy \
  coredns kubectl
export PATH=$k8s_bin:$PATH

pki=$state/pki
mkdir -p "$state/logs" "$state/pids" "$cni_conf_dir" "$ctrd_root" "$ctrd_run"
ip=$(node_ip)
[ -n "$ip" ] || die "no default route: cannot pick the node address"
for cidr in "$pod_cidr" "$service_cidr"; do
  overlap=$(ip -4 route show to match "${cidr%/*}" | grep -v -e '^default' -e 'dev tfbr0' || true)
  [ -z "$overlap" ] || die "$cidr overlaps a host route: $overlap"
done

# Forwarding and bridge netfilter, without modprobe: these modules are built in here, and a
# machine that lacks them gets a warning rather than a half-configured cluster later.
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null ||
  log "warning: net.bridge.bridge-nf-call-iptables unavailable (br_netfilter missing?)"

running() { daemon_pid "$1" >/dev/null; }

start() { # NAME ARGV...: start a daemon in its own session, unless it runs already
  local name=$1; shift
  if running "$name"; then log "$name running"; return 0; fi
  log "starting $name"
  # The daemon must not inherit the cluster lock, or the next run would wait for it forever.
  setsid "$@" >>"$state/logs/$name.log" 2>&1 </dev/null {lock_fd}>&- &
  echo $! >"$state/pids/$name.pid"
}

write_if_changed() { # FILE: stdin into FILE, leaving FILE alone when the content is the same
  local tmp; tmp=$(mktemp "$1.XXXX")
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

wait_for() { # SECONDS DESCRIPTION COMMAND...: poll until COMMAND succeeds
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "$what not ready after ${limit}s (logs: $state/logs)"
    sleep 0.5
  done
}

alive() { running "$1" || die "$1 exited: $(tail -n 20 "$state/logs/$1.log")"; }

# --- certificates and kubeconfigs ---------------------------------------------------------
make_pki "$ip"
server=https://127.0.0.1:$apiserver_port
kubeconfig "$state/kubeconfig" admin "$server"
for c in controller-manager scheduler kubelet kube-proxy; do
  kubeconfig "$state/$c.kubeconfig" "$c" "$server"
done
export KUBECONFIG=$state/kubeconfig

# --- etcd ---------------------------------------------------------------------------------
start etcd etcd --name=taskfleet --data-dir="$state/etcd" \
  --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
  --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster="taskfleet=http://127.0.0.1:$etcd_peer_port"
wait_for 30 etcd curl -fsS "http://127.0.0.1:$etcd_port/health"

# --- control plane ------------------------------------------------------------------------
start kube-apiserver "$k8s_bin/kube-apiserver" \
  --advertise-address="$ip" --bind-address=0.0.0.0 --secure-port="$apiserver_port" \
  --etcd-servers="http://127.0.0.1:$etcd_port" \
  --cert-dir="$state/apiserver-certs" \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
  --client-ca-file="$pki/ca.crt" \
  --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$pki/ca.crt" --kubelet-preferred-address-types=InternalIP \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
  --service-cluster-ip-range="$service_cidr" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --allow-privileged=true --profiling=false
wait_for 90 kube-apiserver kubectl get --raw /readyz
alive kube-apiserver

start kube-controller-manager "$k8s_bin/kube-controller-manager" \
  --kubeconfig="$state/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$state/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$state/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false --cluster-name="$context" \
  --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
  --use-service-account-credentials=true \
  --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
  --service-cluster-ip-range="$service_cidr" --profiling=false
start kube-scheduler "$k8s_bin/kube-scheduler" \
  --kubeconfig="$state/scheduler.kubeconfig" \
  --authentication-kubeconfig="$state/scheduler.kubeconfig" \
  --authorization-kubeconfig="$state/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false --profiling=false

# --- containerd + CNI ---------------------------------------------------------------------
mkdir -p "$state/containerd"
write_if_changed "$state/containerd/config.toml" <<TOML
# Written by e2e/cluster/up.sh. A private containerd: own root, state and socket.
version = 2
root = "$ctrd_root"
state = "$ctrd_run"
[grpc]
  address = "$ctrd_sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Root in this machine cannot lower oom_score_adj: keep the runtime from trying.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # No systemd here: cgroupfs, as the kubelet's cgroupDriver says.
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$cni_conf_dir"
TOML
# MTU 1400 like eth0, so pod packets are not dropped for being too big on the way out.
write_if_changed "$cni_conf_dir/10-taskfleet.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "taskfleet",
  "plugins": [
    {
      "type": "bridge", "bridge": "tfbr0", "isGateway": true, "ipMasq": true,
      "hairpinMode": true, "mtu": 1400,
      "ipam": {
        "type": "host-local", "dataDir": "$cni_data_dir",
        "ranges": [[{"subnet": "$pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
start containerd containerd --config "$state/containerd/config.toml"
wait_for 30 containerd ctr -a "$ctrd_sock" version
alive containerd
"$here/build-images.sh" cluster

# --- kubelet + kube-proxy -----------------------------------------------------------------
write_if_changed "$state/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$ctrd_sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
# No systemd, cgroup v1 (still supported in 1.34; 1.35 needs failCgroupV1: false).
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
clusterDNS: [$dns_ip]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# A shared dev disk may be well filled: evict only when it is really full.
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%, nodefs.inodesFree: 2%}
imageGCHighThresholdPercent: 98
imageGCLowThresholdPercent: 95
serializeImagePulls: false
maxPods: 60
YAML
start kubelet "$k8s_bin/kubelet" --config="$state/kubelet.yaml" \
  --kubeconfig="$state/kubelet.kubeconfig" --hostname-override="$node_name" \
  --node-ip="$ip" --root-dir="$kubelet_root" --v=1

# kube-proxy exits when its config file changes; it is rewritten only when it must.
write_if_changed "$state/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $state/kube-proxy.kubeconfig}
hostnameOverride: $node_name
clusterCIDR: $pod_cidr
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Loopback belongs to the host: NodePorts only on the node address, never on 127.0.0.1,
# so Redis servers of tests on random loopback ports are never captured.
nodePortAddresses: ["$ip/32"]
iptables: {localhostNodePorts: false, masqueradeAll: false}
# Leave the host's conntrack sysctls as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
start kube-proxy "$k8s_bin/kube-proxy" --config="$state/kube-proxy.yaml"

node_ready() {
  [ "$(kubectl get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
wait_for 120 "node $node_name" node_ready
alive kubelet
alive kube-proxy

# --- CoreDNS ------------------------------------------------------------------------------
sed -e "s#__COREDNS_IMAGE__#localhost/coredns:$COREDNS_VERSION#" -e "s#__DNS_IP__#$dns_ip#" \
  "$here/manifests/coredns.yaml" | kubectl apply -f - >/dev/null
kubectl -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null

log "cluster $context is up"
echo "export KUBECONFIG=$state/kubeconfig"
