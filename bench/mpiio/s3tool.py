"""S3 side of bench/mpiio/run.sh (boto3; endpoint and credentials from the AWS_* environment,
the same variables the pdcx servers read for an S3 home).

  s3tool.py ready BUCKET             wait until the endpoint answers, create BUCKET
  s3tool.py probe BUCKET MIB         timed PUT then GET of one MIB MiB object: the link's rate
  s3tool.py serve BUCKET PREFIX REQ ACK
                                     the direct baseline's uploader: for each path read from
                                     the FIFO REQ, upload the file as PREFIX/BASENAME and answer
                                     "ok SECONDS" (or "error ...") on the FIFO ACK; exits at EOF
  s3tool.py sums BUCKET PREFIX       "SHA256  NAME SIZE" of every object under PREFIX/ (read
                                     back through S3 GET), sorted by name
  s3tool.py list BUCKET PREFIX       "NAME SIZE" of every object under PREFIX/
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

MIB = 1 << 20
# Multipart with parallel parts, as pdcx's home copy does (ParaLog §6.3): 8 MiB parts, 8 at
# once. The baseline gets the same kind of uploader pdcx has, only synchronous.
TRANSFER = TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB, max_concurrency=8)


def client():
    return boto3.client(
        "s3",
        endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        config=Config(max_pool_connections=16, retries={"max_attempts": 3}),
    )


def ready(bucket: str) -> int:
    s3 = client()
    deadline = time.monotonic() + 15
    while True:
        try:
            s3.list_buckets()
            break
        except (BotoCoreError, ClientError) as e:
            if time.monotonic() > deadline:
                print(f"s3tool: endpoint not answering: {e}", file=sys.stderr)
                return 1
            time.sleep(0.1)
    s3.create_bucket(Bucket=bucket)
    return 0


def probe(bucket: str, mib: int) -> int:
    """One PUT (a single request and TCP stream, so the figure is the link's, not a parallel
    upload's) and one GET of the same object."""
    s3 = client()
    body = os.urandom(mib * MIB)
    t0 = time.monotonic()
    s3.put_object(Bucket=bucket, Key=".probe", Body=body)
    t1 = time.monotonic()
    got = s3.get_object(Bucket=bucket, Key=".probe")["Body"].read()
    t2 = time.monotonic()
    s3.delete_object(Bucket=bucket, Key=".probe")
    if got != body:
        print("s3tool: probe object read back differs", file=sys.stderr)
        return 1
    print(f"PROBE put_mbps={len(body) / (t1 - t0) / 1e6:.1f} get_mbps={len(body) / (t2 - t1) / 1e6:.1f}")
    return 0


def serve(bucket: str, prefix: str, req: str, ack: str) -> int:
    s3 = client()
    with open(req) as rq, open(ack, "w") as ak:
        for line in rq:
            path = line.rstrip("\n")
            t0 = time.monotonic()
            try:
                s3.upload_file(path, bucket, f"{prefix}/{os.path.basename(path)}", Config=TRANSFER)
                ak.write(f"ok {time.monotonic() - t0:.3f}\n")
            except (OSError, BotoCoreError, ClientError) as e:
                ak.write("error " + str(e).replace("\n", " ") + "\n")
            ak.flush()
    return 0


def objects(s3, bucket: str, prefix: str) -> list[tuple[str, int]]:
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        out += [(o["Key"], o["Size"]) for o in page.get("Contents", [])]
    return sorted(out)


def sums(bucket: str, prefix: str) -> int:
    s3 = client()
    for key, size in objects(s3, bucket, prefix):
        h = hashlib.sha256()
        for chunk in s3.get_object(Bucket=bucket, Key=key)["Body"].iter_chunks(4 * MIB):
            h.update(chunk)
        print(f"{h.hexdigest()}  {key.removeprefix(prefix + '/')} {size}")
    return 0


def listing(bucket: str, prefix: str) -> int:
    for key, size in objects(client(), bucket, prefix):
        print(f"{key.removeprefix(prefix + '/')} {size}")
    return 0


def main(argv: list[str]) -> int:
    cmds = {"ready": (ready, 1), "probe": (probe, 2), "serve": (serve, 4), "sums": (sums, 2), "list": (listing, 2)}
    if not argv or argv[0] not in cmds or len(argv) - 1 != cmds[argv[0]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    f, _ = cmds[argv[0]]
    args = [int(a) if a.isdigit() and argv[0] == "probe" else a for a in argv[1:]]
    return f(*args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
