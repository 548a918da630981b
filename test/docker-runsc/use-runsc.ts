/**
 * Imported first by the files of this directory: the docker suites they import then create
 * their sessions under gVisor (`runsc`, registered by scripts/start-dockerd.sh).
 */
process.env.EXEC_SERVER_TEST_RUNTIME = 'runsc';
