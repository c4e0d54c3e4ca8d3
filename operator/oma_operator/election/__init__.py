"""Leader election: several operator processes share one Lease; the holder acts, the others
stand by (the rules, pure; the elector that reads and writes the Lease; a standby's liveness).
"""
