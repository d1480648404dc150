#!/usr/bin/env bash
# 42-buckets: CreateBucket (new, again = 200, bad names), HeadBucket, GetBucketLocation,
# ListBuckets, DeleteBucket (non-empty 409, empty 204, missing 404), and
# virtual-hosted style (Host: BUCKET.DOMAIN with --virtual-host-domain).
. "$(dirname "$0")/lib.sh"
DOMAIN=s3.e2e.test

t_create() {
    local st
    st=$(s3req -X PUT -o "$T/cb" "/newbkt")
    expect_eq "CreateBucket newbkt" "$st" 200 || { cat "$T/cb"; return 1; }
    [[ -d $S3_STORE/newbkt ]] || { echo "no directory $S3_STORE/newbkt"; return 1; }
    st=$(s3req -X PUT -o "$T/cb" "/newbkt")
    expect_eq "CreateBucket of our existing bucket (us-east-1: 200)" "$st" 200 || { cat "$T/cb"; return 1; }
    # with a LocationConstraint body and x-amz-acl (rclone)
    st=$(s3req -X PUT -H "x-amz-acl: private" \
        -d '<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><LocationConstraint>us-east-1</LocationConstraint></CreateBucketConfiguration>' \
        -o "$T/cb" "/withcfg")
    expect_eq "CreateBucket with a configuration body and x-amz-acl" "$st" 200 || { cat "$T/cb"; return 1; }
    awsc s3api create-bucket --bucket awsmade >/dev/null || return 1
    [[ -d $S3_STORE/awsmade ]] || { echo "aws s3api create-bucket did not create the dir"; return 1; }
}

t_bad_names() {
    local n st rc=0
    for n in ab UPPERCASE "under_score" "-leading" "trailing-" "a..b" "192.168.1.1" \
        "$(head -c 64 /dev/zero | tr '\0' a)" "_x"; do
        st=$(s3req -X PUT -D "$T/eh" -o "$T/eb" "/$n")
        if [[ $n == _x ]]; then
            [[ $st == 4* ]] || { echo "CreateBucket '$n' (reserved _ prefix): expected 4xx, got $st"; rc=1; }
        else
            expect_error 400 InvalidBucketName "$T/eh" "$T/eb" "$st" || { echo "(name '$n')"; rc=1; }
        fi
        [[ ! -e $S3_STORE/$n ]] || { echo "'$n' was created in the store"; rc=1; }
    done
    return $rc
}

t_head_location_list() {
    local st out
    st=$(s3req -X HEAD "/newbkt")
    expect_eq "HeadBucket existing" "$st" 200 || return 1
    st=$(s3req -X HEAD "/nosuchbkt")
    expect_eq "HeadBucket missing" "$st" 404 || return 1
    st=$(s3req -q location -o "$T/loc" "/newbkt")
    expect_eq "GetBucketLocation" "$st" 200 || return 1
    grep -q '<LocationConstraint' "$T/loc" || { echo "no LocationConstraint in $(cat "$T/loc")"; return 1; }
    out=$(awsc s3api get-bucket-location --bucket newbkt) || return 1
    grep -Eq '"LocationConstraint": (null|"us-east-1")' <<<"$out" ||
        { echo "get-bucket-location: $out"; return 1; }
    out=$(awsc s3api list-buckets --query 'Buckets[].Name' --output text) || return 1
    for n in newbkt withcfg awsmade pre; do
        grep -qw "$n" <<<"$out" || { echo "list-buckets lacks $n: $out"; return 1; }
    done
    st=$(s3req -o "$T/lb" "/")
    expect_eq "ListBuckets raw" "$st" 200 || return 1
    grep -q '<ListAllMyBucketsResult' "$T/lb" || { echo "not a ListAllMyBucketsResult: $(head -c 300 "$T/lb")"; return 1; }
    st=$(s3req -D "$T/eh" -o "$T/eb" -q list-type=2 "/nosuchbkt")
    expect_error 404 NoSuchBucket "$T/eh" "$T/eb" "$st"
}

t_delete() {
    local st
    st=$(s3req -X PUT -d data "/newbkt/obj")
    expect_eq "PUT into newbkt" "$st" 200 || return 1
    st=$(s3req -X DELETE -D "$T/eh" -o "$T/eb" "/newbkt")
    expect_error 409 BucketNotEmpty "$T/eh" "$T/eb" "$st" || return 1
    [[ -f $S3_STORE/newbkt/obj ]] || { echo "object gone after a refused bucket delete"; return 1; }
    st=$(s3req -X DELETE "/newbkt/obj")
    expect_eq "DeleteObject" "$st" 204 || return 1
    st=$(s3req -X DELETE "/newbkt")
    expect_eq "DeleteBucket (now empty)" "$st" 204 || return 1
    absent "$S3_STORE/newbkt" || return 1
    st=$(s3req -X DELETE -D "$T/eh" -o "$T/eb" "/newbkt")
    expect_error 404 NoSuchBucket "$T/eh" "$T/eb" "$st" || return 1
    awsc s3 rb s3://awsmade >/dev/null || return 1
    absent "$S3_STORE/awsmade"
}

t_virtual_host() {
    local st
    echo "vhost body" >"$S3_STORE/pre/vh.txt"
    st=$(s3req --host "pre.$DOMAIN:$S3_PORT" -o "$T/vh" "/vh.txt")
    expect_eq "GET /vh.txt with Host: pre.$DOMAIN" "$st" 200 || return 1
    sha_eq "$S3_STORE/pre/vh.txt" "$T/vh" || return 1
    st=$(s3req --host "pre.$DOMAIN:$S3_PORT" -X PUT -d "put via vhost" "/dir/vput.txt")
    expect_eq "PUT with Host: pre.$DOMAIN" "$st" 200 || return 1
    grep -q "put via vhost" "$S3_STORE/pre/dir/vput.txt" || { echo "vhost PUT not in pre/dir/vput.txt"; return 1; }
    st=$(s3req --host "pre.$DOMAIN:$S3_PORT" -q "list-type=2&prefix=dir%2F" -o "$T/vl" "/")
    expect_eq "ListObjectsV2 via vhost" "$st" 200 || return 1
    grep -q '<Key>dir/vput.txt</Key>' "$T/vl" || { echo "vhost listing lacks dir/vput.txt: $(head -c 400 "$T/vl")"; return 1; }
    # path style still works next to it
    st=$(s3req -o "$T/vh2" "/pre/vh.txt")
    expect_eq "path-style GET on the same server" "$st" 200 || return 1
    # awscli in virtual-hosted mode resolves BUCKET.DOMAIN; use curl's --resolve instead
    st=$(timeout 10 curl -s -o "$T/vh3" -w '%{http_code}' --resolve "pre.$DOMAIN:$S3_PORT:127.0.0.1" \
        --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_AK:$S3_SK" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
        "http://pre.$DOMAIN:$S3_PORT/vh.txt")
    expect_eq "curl --aws-sigv4 to http://pre.$DOMAIN:PORT/vh.txt" "$st" 200 || return 1
    sha_eq "$S3_STORE/pre/vh.txt" "$T/vh3"
}

mkdir -p "$S3_STORE/pre"
start_server --virtual-host-domain "$DOMAIN"
check "CreateBucket: new, again (200), with config body, via awscli" t_create
check "invalid bucket names: 400 InvalidBucketName, nothing created" t_bad_names
check "HeadBucket, GetBucketLocation, ListBuckets, NoSuchBucket" t_head_location_list
check "DeleteBucket: non-empty 409, empty 204, missing 404" t_delete
check "virtual-hosted style with --virtual-host-domain" t_virtual_host
