"""Uploads a local lake folder to s3://gpu-lake/fleet/ on an S3-compatible server (the
fleet-lake benchmark's reduced S3 count, docs/performance.md): python3 s3_upload.py ENDPOINT DIR."""
import os, sys, concurrent.futures, boto3
endpoint, root = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                  aws_secret_access_key="test", region_name="us-east-1")
s3.create_bucket(Bucket="gpu-lake")
files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
def put(path):
    with open(path, "rb") as fh:
        s3.put_object(Bucket="gpu-lake", Key="fleet/" + os.path.relpath(path, root), Body=fh.read())
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    list(pool.map(put, files))
print(len(files), "objects uploaded")
