// Command uvxlan-cni is a CNI plugin for uvxlan's routed overlay, compatible
// with flannel's: it reads the subnet.env the agent writes (uvxlan run
// --network ... --subnet-file) and delegates to the reference plugins, bridge
// with host-local IPAM over the node's subnet, as flannel's plugin does.
//
// For one attachment (container ID and interface):
//
//	ADD    read subnet.env (FLANNEL_NETWORK, FLANNEL_SUBNET, FLANNEL_MTU,
//	       FLANNEL_IPMASQ); build the delegate's config (bridge cni-uvx0,
//	       isGateway, mtu, ipMasq unless the agent masquerades, host-local
//	       over the subnet with a route to the cluster network); save it
//	       under dataDir; run the delegate's ADD and print its result.
//	DEL    load the saved delegate config, run the delegate's DEL, remove
//	       the file. It needs neither the agent nor subnet.env, so
//	       containers can be torn down after the agent is gone. Nothing
//	       saved means nothing to delete: success. A saved config that is
//	       empty or torn is rebuilt as ADD would build it (from subnet.env,
//	       or a placeholder range without it), so the address is still
//	       released (host-local releases by container ID and interface).
//	CHECK  run the delegate's CHECK on the saved config with the runtime's
//	       prevResult.
//
// The plugin imports nothing of uvxlan's dataplane: subnet.env is the whole
// interface between the two.
package main
