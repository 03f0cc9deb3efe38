"""What the host is and how dlvirt controls it: host facts, cgroups, observation from inside, engine daemons."""
