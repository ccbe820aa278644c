/**
 * Certificates for the TLS tests, made with `openssl` (installed by `.ci/run`): a private CA
 * and a leaf certificate for `127.0.0.1` signed by it, written once per test process into a
 * temporary directory.
 *
 * @module
 */

/** The files and PEM texts of a test PKI. */
export interface TestPki {
  /** The directory holding every file. */
  dir: string;
  /** The CA certificate (PEM file path). */
  caFile: string;
  /** The leaf certificate for `IP:127.0.0.1` (PEM file path). */
  certFile: string;
  /** The leaf's private key (PEM file path). */
  keyFile: string;
  /** The CA certificate's PEM text. */
  caPem: string;
  /** A second, unrelated CA (PEM text): a client trusting only it must refuse the server. */
  otherCaPem: string;
}

let made: Promise<TestPki> | undefined;

async function openssl(args: string[], cwd: string): Promise<void> {
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("openssl", { args, cwd, stdout: "piped", stderr: "piped" })
      .output();
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
    throw new Error("the TLS tests need openssl (apt-get install openssl; .ci/run does it)");
  }
  if (!out.success) {
    throw new Error(`openssl ${args[0]} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
}

async function makeCa(dir: string, name: string): Promise<void> {
  await openssl([
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-keyout",
    `${name}.key`,
    "-out",
    `${name}.pem`,
    "-days",
    "2",
    "-subj",
    `/CN=lockd test ${name}`,
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
  ], dir);
}

async function make(): Promise<TestPki> {
  const dir = await Deno.makeTempDir({ prefix: "lockd-tls-" });
  await makeCa(dir, "ca");
  await makeCa(dir, "other-ca");
  await openssl([
    "req",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-keyout",
    "node.key",
    "-out",
    "node.csr",
    "-subj",
    "/CN=127.0.0.1",
  ], dir);
  await Deno.writeTextFile(
    `${dir}/node.ext`,
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n" +
      "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
  );
  await openssl([
    "x509",
    "-req",
    "-in",
    "node.csr",
    "-CA",
    "ca.pem",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "node.pem",
    "-days",
    "2",
    "-extfile",
    "node.ext",
  ], dir);
  return {
    dir,
    caFile: `${dir}/ca.pem`,
    certFile: `${dir}/node.pem`,
    keyFile: `${dir}/node.key`,
    caPem: await Deno.readTextFile(`${dir}/ca.pem`),
    otherCaPem: await Deno.readTextFile(`${dir}/other-ca.pem`),
  };
}

/** The test PKI, made on first use. */
export function testPki(): Promise<TestPki> {
  made ??= make();
  return made;
}

/** `--tls-cert`, `--tls-key` and `--tls-ca` for a node of the test PKI. */
export function tlsArgs(pki: TestPki): string[] {
  return ["--tls-cert", pki.certFile, "--tls-key", pki.keyFile, "--tls-ca", pki.caFile];
}
