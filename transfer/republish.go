package transfer

// Republish stores this engine's mooncake/rpc_meta and mooncake/ram
// documents in the metadata backend again. A store client calls it when it
// remounts its segments, because the metadata store may have lost them
// (upstream's client re-publishes its TE segment too): a restarted
// mooncake_master also restarts its embedded HTTP metadata store empty.
// It is a no-op with P2PHANDSHAKE.
func (e *Engine) Republish() error {
	if e.p2p {
		return nil
	}
	if err := e.enter("republish"); err != nil {
		return err
	}
	defer e.life.Exit()
	return e.publish()
}
