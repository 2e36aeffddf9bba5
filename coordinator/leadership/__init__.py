"""Who leads: the leader role every replica holds, elected through ZooKeeper or through a
lease row in the SQL store (one replica on the embedded default), and the store lock that
keeps a second coordinator off one embedded database."""
