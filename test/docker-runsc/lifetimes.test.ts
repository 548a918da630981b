// The docker suite for ending every process of a session (test/docker/lifetimes.test.ts) under gVisor.
import './use-runsc.ts';
import '../docker/lifetimes.test.ts';
