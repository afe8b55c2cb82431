//! Sending one `ExportMetricsServiceRequest` (the agent's GPU-health metrics) to a collector
//! over the same transport, TLS, headers and compression as the log sink.

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use tonic::codec::CompressionEncoding;

use super::transport::{grpc_error, Accepted, ExportError, Exporter};

impl Exporter {
    /// Sends one metrics request; `rejected` counts the data points the collector refused.
    pub async fn export_metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> Result<Accepted, ExportError> {
        let response = match self {
            Exporter::Grpc { channel, gzip, .. } => {
                let mut client = MetricsServiceClient::new(channel.clone());
                if *gzip {
                    client = client.send_compressed(CompressionEncoding::Gzip);
                }
                match client.export(self.grpc_request(request)).await {
                    Ok(response) => Some(response.into_inner()),
                    Err(status) => return Err(grpc_error(&status)),
                }
            }
            Exporter::Http { .. } => self.post::<ExportMetricsServiceResponse>(&request).await?,
        };
        Ok(Accepted {
            rejected: response
                .and_then(|r| r.partial_success)
                .map(|p| p.rejected_data_points.max(0) as u64)
                .unwrap_or(0),
        })
    }
}
