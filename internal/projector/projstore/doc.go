// Package projstore is the projector's own storage in Redis, beside the
// read model: the children index that a parent's end reaches its children
// through (children.go), the outbox of change-feed records to produce
// again after a crash (outbox.go), the armed deadlines the firer fires
// (deadlines.go), the replication wait on Redis Cluster (replication.go),
// a lost partition's rebuild: the rebuild mark on its checkpoint and
// the deletion of its snapshots (partition.go), the partitions' ownership
// epochs, which fence every write of a projector that no longer owns a
// partition (epoch.go), and archived sessions' tombstones (tombstones.go).
//
// Store embeds pkg/snapshot's Store, whose methods are the public contract
// of a snapshot store (pkg/snapshot/snapshottest), and adds these. They are
// here, internal, because only the projector uses them: the query service
// and any other reader take the narrower public store. Both stores lay
// their keys and scripts out as internal/redislayout says, under the same
// prefix, so each key name and each Lua script is written once; the
// snapshot store's Reset deletes this package's keys too.
//
// The rules of these operations are tested against redis-server, a Redis
// Cluster and miniredis, as the public contract is (contract_test.go).
package projstore
