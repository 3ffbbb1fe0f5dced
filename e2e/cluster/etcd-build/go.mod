// The pinned etcd for the offline kind node image (e2e/cluster/build-k8s.sh etcd): kubeadm
// probes /livez and /readyz, which Debian's etcd 3.4 lacks.
module taskfleet.dev/etcd-build

go 1.24

require go.etcd.io/etcd/server/v3 v3.6.5
