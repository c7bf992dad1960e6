// Package client is the KV store client: it contributes memory to the pool
// (a segment mounted on the master), and puts and gets objects by moving
// bytes directly between clients with the Transfer Engine. The master is
// asked only where replicas are.
//
// Copying operations (Put, Get) stage bytes through the client's local
// buffer, as upstream does; zero-copy operations (PutFrom, GetInto) move
// bytes straight from and to the caller's memory.
package client
